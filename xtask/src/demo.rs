//! The main job of the README: build the package (the Python extension,
//! which carries the command line too: one Rust build), then write a model
//! from Python, inspect, verify and convert it with the command line, and
//! load it back.
//!
//! It installs only what it uses (maturin and numpy), none of the test
//! suite's servers and packages, and builds with cargo's `dev` profile,
//! which compiles in half the time of a release build and is fast enough
//! for a small model. `cargo xtask checks` builds the release artifacts, and
//! runs the format crate's own example (`crate::ci::format_example`), whose
//! dev-dependencies (criterion, proptest, safetensors) the demo need not
//! compile.

use std::process::Command;

use crate::steps::Steps;
use crate::util::exec;

pub fn run() -> Result<(), String> {
    let mut steps = Steps::new("cargo xtask demo");
    demo_steps(&mut steps)
}

/// The demo as one step of CI's table.
pub fn run_steps() -> Result<(), String> {
    demo_steps(&mut Steps::new("demo"))
}

fn demo_steps(steps: &mut Steps) -> Result<(), String> {
    steps.run("python venv (maturin, numpy)", crate::python::setup_demo)?;
    steps.run("build and install the package (maturin develop)", crate::python::install_develop)?;
    steps.run("demo.py (Python and `python -m deathtensors`)", || {
        exec(Command::new(crate::python::python()).arg("bindings/python/examples/demo.py"))
    })?;
    Ok(())
}
