//! `deathtensors ls`: tensor names, one a line.

use std::io::Write;

use crate::args::LsArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::Out;

pub fn run(args: LsArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let reader = ctx.open(&args.file)?;
    reader.check_not_hidden()?;
    let mut out = Out::new();
    let names = reader.header().tensors().iter().map(|t| t.name.as_str());
    if args.json {
        out.json(&names.collect::<Vec<_>>().into())?;
    } else {
        for name in names {
            writeln!(out, "{name}")?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}
