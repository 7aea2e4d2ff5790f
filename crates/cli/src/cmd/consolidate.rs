//! `deathtensors consolidate`: a distributed checkpoint (of
//! `deathtensors.distributed`) as one full-model file or a Hugging Face
//! sharded checkpoint, through io's `consolidate`: of a local directory,
//! or of a URL prefix (`s3://`, `gs://`, `az://`, `http(s)://`) read through
//! `deathtensors-remote` with the run's storage options.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use deathtensors_io::format::Format;
use deathtensors_io::{ConsolidateOptions, DEFAULT_MAX_SHARD_BYTES};

use crate::args::FormatArg;
use crate::context::RunContext;
use crate::exit::ExitCode;

/// Options of `consolidate` (kept here rather than in `args.rs`: one
/// subcommand, one file).
#[derive(Debug, Args)]
pub struct ConsolidateArgs {
    /// Object store settings (for a checkpoint on an object store).
    #[command(flatten)]
    pub store: crate::args::StoreOptions,
    /// The checkpoint: a directory, or an `s3://`, `gs://`, `az://` or `http(s)://` prefix (with `deathtensors.json`).
    pub checkpoint: PathBuf,
    /// One local file, or a local directory (existing, or ending in `/`) for a Hugging Face sharded checkpoint.
    pub out: PathBuf,
    /// For a directory: the largest shard in bytes (a larger tensor gets a shard of its own).
    #[arg(long, default_value_t = DEFAULT_MAX_SHARD_BYTES)]
    pub max_shard_bytes: u64,
    /// For one file: its format [default: safetensors for a .safetensors name, else deathtensors].
    #[arg(long, value_enum)]
    pub to: Option<FormatArg>,
}

pub fn run(args: ConsolidateArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let format = match args.to {
        None => None,
        Some(FormatArg::Deathtensors) => Some(Format::Deathtensors),
        Some(FormatArg::Safetensors) => Some(Format::Safetensors),
        Some(FormatArg::Bintensors) => anyhow::bail!("--to bintensors: consolidate writes deathtensors or safetensors"),
    };
    let options = ConsolidateOptions { max_shard_bytes: args.max_shard_bytes, format, ..ConsolidateOptions::default() };
    let written = ctx
        .consolidate(&args.checkpoint, &args.out, &options)
        .with_context(|| format!("failed to consolidate {}", args.checkpoint.display()))?;
    for path in written {
        println!("{}", path.display());
    }
    Ok(ExitCode::Success)
}
