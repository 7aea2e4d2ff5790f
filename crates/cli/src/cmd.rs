//! One module per subcommand, each with `run(args) -> anyhow::Result<ExitCode>`.

mod blob;
mod cat;
mod convert;
mod crypt;
mod diff;
mod inspect;
mod ls;
mod manifest;
mod meta;
mod stats;
pub(crate) mod verify;

use crate::args::Command;
use crate::exit::ExitCode;

/// Runs one subcommand.
pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Ls(args) => ls::run(args),
        Command::Manifest(args) => manifest::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Stats(args) => stats::run(args),
        Command::Cat(args) => cat::run(args),
        Command::Meta(args) => meta::run(args),
        Command::Keygen(args) => crypt::keygen(args),
        Command::Encrypt(args) => crypt::encrypt(args),
        Command::Decrypt(args) => convert::run_with(args, true),
        Command::Sign(args) => crypt::sign(args),
        Command::Blob(args) => blob::run(args),
    }
}
