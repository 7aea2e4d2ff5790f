//! The `deathtensors` binary: everything is in the library, which the Python
//! package's `python -m deathtensors` runs too.

fn main() -> std::process::ExitCode {
    let code = deathtensors_cli::main_with_args(std::env::args_os());
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(2))
}
