//! The `deathtensors` command line: inspect, check and convert deathtensors
//! and safetensors files from a shell or a script.
//!
//! A thin layer over `deathtensors-io`: clap parses the arguments, one
//! module per subcommand runs it with the run's settings (keys, policy
//! input, storage options: one `RunContext`, no process-wide state), and
//! [`main_with_args`] maps the outcome to an exit code (0 ok, 1 invalid file or failed check,
//! 2 anything else). The `deathtensors` binary and the Python package's
//! `python -m deathtensors` both call [`main_with_args`].
//!
//! # Example
//!
//! ```
//! let code = deathtensors_cli::main_with_args(["deathtensors", "ls", "no-such-file.dt"]);
//! assert_eq!(code, 2);
//! ```

mod args;
mod cmd;
mod collection;
mod context;
mod copy;
mod exit;
mod integrity;
mod keys;
mod out;
mod progress;
mod remote;
mod sharded;
mod signers;
mod verdict;

use std::ffi::OsString;

use clap::Parser;

use crate::context::RunContext;

/// Parses `args` (the first is the program name), runs the subcommand and
/// returns the process's exit code: 0 ok, 1 a file is invalid or a check
/// failed, 2 usage or other errors. Errors are printed on stderr in one line,
/// as `deathtensors: error: ...`; a closed stdout ends quietly with 0.
pub fn main_with_args<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    for note in deprecated_spellings(&args) {
        out::note(note);
    }
    let cli = match args::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout, usage errors to stderr; clap's
            // exit codes are 0 and 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    let result = RunContext::new(&cli.command.read_args()).and_then(|ctx| cmd::run(cli.command, &ctx));
    match result {
        Ok(code) => code as i32,
        Err(err) => {
            let code = exit::code_for(&err);
            if code != 0 {
                out::error(&exit::one_line(&err));
            }
            code
        }
    }
}

/// Notes for old spellings of flags that still work: `--to` meant both an
/// output format and a recipient (issue 61), and is now `--format` or
/// `--recipient`.
fn deprecated_spellings(args: &[OsString]) -> Vec<&'static str> {
    let flag =
        |name: &str| args.iter().any(|a| a.to_str().is_some_and(|a| a == name || a.starts_with(&format!("{name}="))));
    let encrypt = args.iter().any(|a| a == "encrypt");
    let mut notes = Vec::new();
    if flag("--to") {
        notes.push(if encrypt {
            "--to is an old spelling: use --recipient for encrypt's recipients"
        } else {
            "--to is an old spelling: use --format for the output format"
        });
    }
    if flag("--to-passphrase-env") {
        notes.push("--to-passphrase-env is an old spelling: use --recipient-passphrase-env");
    }
    notes
}
