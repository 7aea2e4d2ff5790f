//! `deathtensors scan`: what a pickle checkpoint refers to and would call,
//! read by io's pickle machine without running anything (docs/PICKLE.md).

use std::io::Write;

use deathtensors_io::format::pickle::NameRef;

use crate::args::ScanArgs;
use crate::exit::{self, ExitCode};
use crate::out::Out;

pub fn run(args: ScanArgs) -> anyhow::Result<ExitCode> {
    let mut out = Out::new();
    let mut all_plain = true;
    for path in &args.files {
        let shown = path.display();
        let (plain, report) = match deathtensors_io::scan_pickle(path) {
            Ok(scan) => {
                let refused: Vec<&NameRef> = scan.names.iter().filter(|n| !n.allowed).collect();
                let verdict = match &scan.verdict {
                    Ok(n) => format!("a plain tensor checkpoint ({n} tensors, pickle protocol {})", scan.protocol),
                    Err(e) => format!("not a plain tensor checkpoint: {e}"),
                };
                let json = serde_json::json!({
                    "file": shown.to_string(),
                    "plain": scan.verdict.is_ok(),
                    "verdict": verdict,
                    "protocol": scan.protocol,
                    "names": scan.names.iter().map(name_json).collect::<Vec<_>>(),
                    "calls": scan.calls.iter().map(name_json).collect::<Vec<_>>(),
                });
                let mut text = format!("{shown}: {verdict}");
                for n in &refused {
                    text.push_str(&format!("\n  refers to {} (byte {}), not on the allow list", n.name, n.offset));
                }
                for c in &scan.calls {
                    text.push_str(&format!("\n  would call {} (byte {})", c.name, c.offset));
                }
                (scan.verdict.is_ok(), (text, json))
            }
            // A file that is not there (or not readable) is not a verdict on
            // a checkpoint: exit 2 with the same wording as every command.
            Err(e) if matches!(e.kind(), deathtensors_io::ErrorKind::Io(_)) => return Err(e.into()),
            Err(e) => {
                let why = exit::one_line(&anyhow::Error::new(e));
                let json = serde_json::json!({"file": shown.to_string(), "plain": false, "verdict": why});
                (false, (format!("{shown}: cannot be read: {why}"), json))
            }
        };
        all_plain &= plain;
        if args.json {
            out.json(&report.1)?;
        } else {
            writeln!(out, "{}", report.0)?;
        }
    }
    out.finish()?;
    Ok(if all_plain { ExitCode::Success } else { ExitCode::Failure })
}

fn name_json(n: &NameRef) -> serde_json::Value {
    serde_json::json!({"name": n.name, "offset": n.offset, "allowed": n.allowed})
}
