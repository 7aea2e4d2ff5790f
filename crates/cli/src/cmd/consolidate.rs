//! `deathtensors consolidate`: a distributed checkpoint (of
//! `deathtensors.distributed`) as one full-model file or a Hugging Face
//! sharded checkpoint, through io's `consolidate`: of a local directory,
//! or of a URL prefix (`s3://`, `gs://`, `az://`, `http(s)://`) read through
//! `deathtensors-remote` with the run's storage options.

use deathtensors_io::format::Format;
use deathtensors_io::ConsolidateOptions;

use crate::args::{ConsolidateArgs, FormatArg};
use crate::context::RunContext;
use crate::exit::ExitCode;

pub fn run(args: ConsolidateArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let format = match args.format {
        None => None,
        Some(FormatArg::Deathtensors) => Some(Format::Deathtensors),
        Some(FormatArg::Safetensors) => Some(Format::Safetensors),
        // io refuses it, saying why.
        Some(FormatArg::Bintensors) => Some(Format::Bintensors),
    };
    let options = ConsolidateOptions { max_shard_bytes: args.max_shard_bytes, format, ..ConsolidateOptions::default() };
    // io's errors name the checkpoint and what failed ("cannot consolidate").
    let written = ctx.consolidate(&args.checkpoint, &args.out, &options)?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(ExitCode::Success)
}
