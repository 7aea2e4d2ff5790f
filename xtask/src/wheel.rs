//! The host's release wheel in `.venv`: built as `cargo xtask dist` builds
//! it (`dist.rs`), installed into the test venv (`python.rs`), so that the
//! tests run against the wheel that ships.

use std::process::Command;

use crate::python::{path_str, pip_install, pytest, python, setup, venv};
use crate::util::{exec, root};

/// Builds the host's release wheel, checks what it ships, and installs it
/// into `.venv`: the tests run against the wheel that ships, not a
/// development tree. On a host `dist` builds wheels for, it is built as
/// `cargo xtask dist` builds it (so that a `dist` after it has no wheel to
/// build); elsewhere (macOS, say) with maturin's own release build.
pub fn install() -> Result<(), String> {
    let out = root().join("target/wheels");
    let _ = std::fs::remove_dir_all(&out);
    if !crate::dist::host_wheel(&out)? {
        exec(
            Command::new(venv().join("bin/maturin"))
                .args(["build", "--release", "--quiet", "-m", "bindings/python/Cargo.toml", "-o"])
                .arg(&out)
                .env("VIRTUAL_ENV", venv()),
        )?;
    }
    let wheel = crate::util::wheel_in(&out, "").map_err(|e| format!("maturin built no wheel: {e}"))?;
    // The wheel must ship the stubs and the typing marker.
    let check = "import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist(); \
                 missing = [n for n in ('deathtensors/py.typed', 'deathtensors/_native.pyi', 'deathtensors/__init__.py') if n not in names]; \
                 assert not missing, f'wheel lacks {missing}'; \
                 assert any(n.startswith('deathtensors/_native') and n.endswith('.so') for n in names), 'no extension module'";
    exec(Command::new(python()).args(["-c", check]).arg(&wheel))?;
    pip_install(&["--force-reinstall", "--no-deps", path_str(&wheel)?])
}

/// `cargo xtask python`: the Python tests (all of them), on the release wheel.
pub fn test() -> Result<(), String> {
    setup()?;
    install()?;
    pytest(None)
}
