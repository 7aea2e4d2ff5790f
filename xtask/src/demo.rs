//! The main job of the README: build everything (the command line and the
//! Python wheel), then write a model from Python, inspect, verify and convert
//! it with the command line, and load it back.

use std::process::Command;

use crate::util::{cargo, exec, root};

pub fn run() -> Result<(), String> {
    crate::setup::run_setup()?;
    crate::python::setup()?;
    cargo(&["build", "--workspace", "--release"])?;
    crate::python::install_wheel()?;
    let cli = root().join("target/release/deathtensors");
    exec(Command::new(crate::python::python()).arg("bindings/python/examples/demo.py").arg(&cli))?;
    // The format crate alone, on files written by the reference implementations.
    for file in [
        "testdata/valid/deathtensors-0.3.0/all_dtypes_checksum.deathtensors",
        "testdata/valid/safetensors-0.8.0/all_dtypes.safetensors",
    ] {
        cargo(&["run", "--quiet", "--release", "-p", "deathtensors-format", "--example", "inspect", "--", file])?;
    }
    Ok(())
}
