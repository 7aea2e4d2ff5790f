//! `python -m deathtensors`: the command line's own code, in-process.

use pyo3::prelude::*;

/// Runs the `deathtensors` command line with `argv` (program name first)
/// and returns its exit code. The GIL is released while it runs.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> i32 {
    py.allow_threads(|| deathtensors_cli::main_with_args(argv))
}
