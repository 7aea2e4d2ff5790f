//! Benchmarks: the criterion benches of the Rust crates, then the Python
//! script that compares the package with safetensors and deathtensors 0.3.0.
//! `cargo xtask bench [--rust|--python] [ARGS for the Python script]`;
//! `cargo xtask bench --compress [ARGS]` runs only the compression
//! benchmark (`bindings/python/benches/compress_bench.py`);
//! `cargo xtask bench --remote [ARGS]` the remote one (nginx on loopback,
//! side by side with curl: `crates/remote/examples/remote_bench.rs`);
//! `cargo xtask bench --dcp [ARGS]` the distributed checkpoint one (4 ranks
//! against torch's storages: `bindings/python/benches/dcp_bench.py`).

use std::process::Command;

use crate::util::{cargo, exec};

pub fn run(args: &[String]) -> Result<(), String> {
    let (rust, python, rest) = match args.first().map(String::as_str) {
        Some("--rust") => (true, false, &args[1..]),
        Some("--python") => (false, true, &args[1..]),
        Some("--remote") => {
            // nginx on loopback, our reads and curl's download in one run.
            crate::setup::run_setup()?;
            let example = ["run", "--release", "-p", "deathtensors-remote", "--example", "remote_bench", "--"];
            return cargo(&[&example[..], &args[1..].iter().map(String::as_str).collect::<Vec<_>>()].concat());
        }
        Some("--compress") => return python_bench("compress_bench.py", &args[1..]),
        Some("--dcp") => return python_bench("dcp_bench.py", &args[1..]),
        _ => (true, true, args),
    };
    if rust {
        cargo(&["bench", "-p", "deathtensors-format", "-p", "deathtensors-io"])?;
    }
    if python {
        python_bench("bench.py", rest)?;
    }
    Ok(())
}

/// Runs `bindings/python/benches/SCRIPT ARGS` on the release wheel.
fn python_bench(script: &str, args: &[String]) -> Result<(), String> {
    crate::python::setup()?;
    crate::wheel::install()?;
    exec(Command::new(crate::python::python()).arg(format!("bindings/python/benches/{script}")).args(args))
}
