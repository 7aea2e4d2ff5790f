//! `deathtensors ls`: tensor names, one a line.

use std::io::Write;

use crate::args::LsArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::Out;

pub fn run(args: LsArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let input = crate::sharded::Input::open(ctx, &args.file)?;
    let mut out = Out::new();
    let names = input.names().into_iter();
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
