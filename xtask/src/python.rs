//! The Python package: a `.venv` with its test dependencies, the extension
//! built into it with maturin, and pytest.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{exec, root, succeeds};

/// What the tests need from PyPI. torch is the CPU-capable build PyPI
/// serves; ml_dtypes gives numpy bf16 and fp8; safetensors is the
/// reference the benchmark and the drop-in tests compare with.
const REQUIREMENTS: &[&str] =
    &["maturin>=1.5,<2", "numpy", "pytest", "hypothesis", "torch", "ml_dtypes", "safetensors==0.8.0"];

/// The project's virtualenv.
pub fn venv() -> PathBuf {
    root().join(".venv")
}

pub fn python() -> PathBuf {
    venv().join("bin").join("python")
}

/// Creates `.venv` and installs the requirements, if not done yet.
pub fn setup() -> Result<(), String> {
    if !python().exists() {
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string());
        exec(Command::new(base).args(["-m", "venv"]).arg(venv()))?;
    }
    let check =
        "import numpy, pytest, hypothesis, torch, ml_dtypes, safetensors; assert safetensors.__version__ == '0.8.0'";
    let ready = succeeds(Command::new(python()).args(["-c", check])) && venv().join("bin/maturin").exists();
    if !ready {
        exec(Command::new(python()).args(["-m", "pip", "install", "--quiet", "--upgrade", "pip"]))?;
        exec(Command::new(python()).args(["-m", "pip", "install", "--quiet"]).args(REQUIREMENTS))?;
    }
    Ok(())
}

/// Builds the extension (release) into `.venv`.
pub fn develop() -> Result<(), String> {
    exec(
        Command::new(venv().join("bin/maturin"))
            .args(["develop", "--release", "--quiet", "-m", "bindings/python/Cargo.toml"])
            .env("VIRTUAL_ENV", venv()),
    )
}

/// Runs the Python tests.
pub fn test() -> Result<(), String> {
    setup()?;
    develop()?;
    exec(Command::new(python()).args(["-m", "pytest", "bindings/python/tests", "-q", "-p", "no:cacheprovider"]))
}
