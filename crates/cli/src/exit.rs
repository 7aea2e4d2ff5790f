//! How a run ends: its exit code, and its error in one line.

use std::fmt;

use deathtensors_io::ErrorKind;

/// How a subcommand that ran to its end went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// All is well (exit code 0).
    Success = 0,
    /// A check failed or the files differ, already reported (exit code 1).
    Failure = 1,
}

/// Exit code for usage and other errors.
pub const OTHER: i32 = 2;

/// An error that means a check failed or a file is invalid (exit code 1),
/// when no `deathtensors_io::Error` says so.
#[derive(Debug)]
pub struct CheckFailed(pub String);

impl fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

/// The exit code for an error: 0 for a closed pipe (`| head`), 1 for an
/// invalid file or a failed check, 2 for everything else.
pub fn code_for(err: &anyhow::Error) -> i32 {
    let broken_pipe = err.chain().any(|cause| {
        let io = cause.downcast_ref::<std::io::Error>().or_else(|| {
            match cause.downcast_ref::<deathtensors_io::Error>()?.kind() {
                ErrorKind::Io(e) => Some(e),
                _ => None,
            }
        });
        io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return 0;
    }
    let invalid = err.chain().any(|cause| {
        cause.is::<CheckFailed>() || cause.downcast_ref::<deathtensors_io::Error>().is_some_and(|e| e.is_invalid_file())
    });
    if invalid {
        1
    } else {
        OTHER
    }
}

/// The error and its causes in one line, each cause once: the errors of
/// `deathtensors-io` already include their source in their message.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace(['\n', '\r'], " ")
}

/// An error from writing `output`: the file being written is not the input,
/// so it is not an invalid file (exit code 2), unless it came from reading
/// the input (another path, or a failed check of the bytes read), which
/// keeps its own exit code.
pub fn writing(e: deathtensors_io::Error, output: &std::path::Path) -> anyhow::Error {
    if e.path() != Some(output) {
        return e.into();
    }
    match e.kind() {
        // Bytes that failed their check were read, from the input (a file
        // rewritten in place, by `meta`, is both).
        ErrorKind::TensorDigestMismatch { .. } | ErrorKind::ChecksumMismatch { .. } => e.into(),
        ErrorKind::Format(f) => anyhow::anyhow!("cannot write {}: {f}", output.display()),
        _ if e.is_invalid_file() => anyhow::anyhow!("{e}"),
        _ => e.into(),
    }
}
