//! One module per subcommand, each with `run(args, ctx) -> anyhow::Result<ExitCode>`
//! (`ctx`: the run's keys, policy input and storage options).

mod blob;
mod cat;
pub(crate) mod consolidate;
mod convert;
mod crypt;
mod diff;
mod inspect;
pub(crate) mod key;
mod ls;
mod manifest;
mod meta;
pub(crate) mod model_sign;
mod scan;
mod stats;
pub(crate) mod verify;

use crate::args::Command;
use crate::context::RunContext;
use crate::exit::ExitCode;

/// Runs one subcommand.
pub fn run(command: Command, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    match command {
        Command::Inspect(args) => inspect::run(args, ctx),
        Command::Ls(args) => ls::run(args, ctx),
        Command::Manifest(args) => manifest::run(args, ctx),
        Command::Verify(args) => verify::run(args, ctx),
        Command::Convert(args) => convert::run(args, ctx),
        Command::Diff(args) => diff::run(args, ctx),
        Command::Stats(args) => stats::run(args, ctx),
        Command::Cat(args) => cat::run(args, ctx),
        Command::Meta(args) => meta::run(args, ctx),
        Command::Keygen(args) => crypt::keygen(args),
        Command::Key(args) => key::run(args),
        Command::Encrypt(args) => crypt::encrypt(args, ctx),
        Command::Decrypt(args) => convert::run_with(args, true, ctx),
        Command::Sign(args) => crypt::sign(args),
        Command::SignModel(args) => model_sign::sign(args),
        Command::VerifyModel(args) => model_sign::verify(args),
        Command::Blob(args) => blob::run(args, ctx),
        Command::Consolidate(args) => consolidate::run(args, ctx),
        Command::Scan(args) => scan::run(args),
    }
}
