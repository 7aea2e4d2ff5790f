//! `deathtensors manifest`: the header as a JSON sidecar file.

use std::io::Write;

use crate::args::ManifestArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::Out;

pub fn run(args: ManifestArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let reader = ctx.open(&args.file)?;
    let written = deathtensors_io::write_manifest(&reader, args.out.as_deref(), env!("CARGO_PKG_VERSION"), true)?;
    let mut out = Out::new();
    writeln!(out, "wrote {}", written.display())?;
    out.finish()?;
    Ok(ExitCode::Success)
}
