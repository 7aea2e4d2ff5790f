//! `deathtensors verify`: the SHA-256 footer and every per-tensor digest, on
//! all cores, naming each tensor or byte range that does not match.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use deathtensors_io::format::hex_digest;
use deathtensors_io::{FooterCheck, Mismatch, TagCheck, Verdict};
use serde_json::{json, Value};

use crate::args::VerifyArgs;
use crate::context::RunContext;
use crate::exit::{CheckFailed, ExitCode};
use crate::out::{self, Out};
use crate::progress;
use crate::signers::Trusted;
use crate::verdict::{report_json, unsigned_tensors, Kind, Report};

fn describe(m: &Mismatch) -> String {
    let (start, end) = m.range;
    let (expected, actual) = (hex_digest(&m.expected), hex_digest(&m.actual));
    match &m.tensor {
        Some(name) => format!(
            "tensor {name:?} (file bytes {start}..{end}) is corrupt: header says sha256 {expected}, bytes hash to {actual}"
        ),
        None => format!(
            "SHA-256 footer mismatch over file bytes {start}..{end} (header and data): footer says {expected}, contents hash to {actual}"
        ),
    }
}

fn mismatch_json(m: &Mismatch) -> Value {
    json!({
        "tensor": m.tensor,
        "range": [m.range.0, m.range.1],
        "expected": hex_digest(&m.expected),
        "actual": hex_digest(&m.actual),
    })
}

/// With `--json`, a failure before the report (a signature or requirement
/// at open, a tag that does not verify) is still one JSON document on
/// stdout, `ok` false; the error goes on as usual (stderr, exit code).
fn report(args: &VerifyArgs, err: anyhow::Error) -> anyhow::Error {
    report_json(&args.file, Kind::File, args.json, err)
}

pub fn run(args: VerifyArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    if crate::collection::is_collection(&args.file) {
        return crate::collection::verify(&args.file, args.allow_missing, args.json);
    }
    // Each --signer file is read once: for the open's requirements and
    // for naming the signers in the report.
    let trusted = Trusted::load(&args.signer)?;
    let options = ctx.read_options_trusting(&trusted, args.require_signature);
    if crate::sharded::is_index_requiring(ctx, &args.file, &options) {
        return crate::sharded::verify(ctx, &args, options);
    }
    // Signatures and requirements are checked at open (the one that
    // `is_index_requiring` made, for a URL).
    let reader = ctx.open_kept_or(&args.file, || options).map_err(|e| report(&args, e.into()))?;
    let path = args.file.display();
    let signers: Vec<String> = reader.signers().iter().map(|k| k.fingerprint()).collect();
    let signature_required = args.require_signature || !args.signer.is_empty();
    if signature_required {
        unsigned_tensors(&reader).map_err(|e| report(&args, e))?;
    }
    // The verdict is io's (`VerifyReport`): this renders it.
    let header = reader.header();
    let footer_bytes = reader.head().checksummed().map_or(0, |(start, end)| end - start);
    let tensor_bytes: u64 = header.tensors().iter().filter(|t| t.sha256.is_some()).map(|t| t.byte_len()).sum();
    let tag_bar =
        reader.can_decrypt().then(|| progress::bar(header.tensors().iter().map(|t| t.byte_len()).sum(), "decrypting"));
    // The footer's pass and the digests' pass read the same bytes twice:
    // the bar counts the file's bytes, as far as both passes have come.
    let passes = Passes::new(footer_bytes, tensor_bytes);
    let found = reader
        .verify_report(
            |n| {
                if let Some(bar) = &tag_bar {
                    bar.inc(n);
                }
            },
            |n| passes.footer(n),
            |n| passes.tensors(n),
        )
        .map_err(|e| report(&args, e.into()))?;
    if let Some(bar) = tag_bar {
        bar.finish_and_clear();
    }
    passes.bar.finish_and_clear();
    let tags = match found.tags {
        TagCheck::Ok => "ok",
        TagCheck::NotChecked => "not checked (no key)",
        TagCheck::Skipped => "not checked (a digest failed first)",
        TagCheck::Absent => "absent",
    };
    let footer_status = match found.footer.0 {
        FooterCheck::Ok => "ok",
        FooterCheck::Mismatch => "mismatch",
        FooterCheck::Absent => "absent",
    };
    let verdict = found.verdict();
    let excused = matches!(verdict, Verdict::NothingToCheck | Verdict::KeyNeeded) && args.allow_missing;
    let mut out = Out::new();
    if matches!(verdict, Verdict::NothingToCheck | Verdict::KeyNeeded) && !args.allow_missing {
        let why = if verdict == Verdict::KeyNeeded {
            let passed = match (found.footer.0, found.tensors_verified) {
                (FooterCheck::Ok, 0) => "its SHA-256 footer matches (the stored bytes are unchanged), ".to_string(),
                (FooterCheck::Ok, n) => format!("its SHA-256 footer and {n} tensor digests match, "),
                (_, 0) => String::new(),
                (_, n) => format!("{n} tensor digests match, "),
            };
            let signed = if signers.is_empty() {
                String::new()
            } else {
                let all_trusted = reader.signers().iter().all(|k| trusted.trusts(k));
                format!(
                    "the signature of {} {}, ",
                    reader.signers().iter().map(|k| trusted.name(k)).collect::<Vec<_>>().join(", "),
                    if all_trusted { "verifies (a key you trust)" } else { "is valid (its key is not trusted)" }
                )
            };
            format!(
                "cannot verify {path}: it is encrypted and no key given opens it: {signed}{passed}but its chunks' tags were not checked (give --key, or pass --allow-missing to accept that)"
            )
        } else {
            format!(
                "{path}: no checksum to verify: the file has no SHA-256 footer and no tensor digests (pass --allow-missing to accept that)"
            )
        };
        return Err(report(&args, CheckFailed(why).into()));
    }

    if args.json {
        out.json(
            &Report {
                path: args.file.to_string_lossy().into_owned(),
                kind: Kind::File,
                verdict: match verdict {
                    Verdict::Ok => "ok",
                    Verdict::Failed => "failed",
                    Verdict::NothingToCheck => "nothing to check (allowed)",
                    Verdict::KeyNeeded => "encrypted, no key: tags not checked (allowed)",
                },
                checked: json!({
                    "footer": footer_status,
                    "tensors_verified": found.tensors_verified,
                    "tensors": found.tensors,
                    "tags": tags,
                }),
                unverified: found.unverified.clone(),
                signers: signers.clone(),
                signer_keys: reader.signers().iter().map(|k| trusted.to_json(k)).collect(),
                failures: found.failures.iter().map(mismatch_json).collect(),
                error: None,
            }
            .to_json(),
        )?;
    } else if verdict == Verdict::NothingToCheck {
        writeln!(out, "{path}: no checksum to verify (allowed by --allow-missing)")?;
    } else if found.failures.is_empty() {
        let mut checked = Vec::new();
        if let Some((start, end)) = found.footer.1 {
            checked.push(format!("SHA-256 footer over bytes {start}..{end}"));
        }
        if found.tensors_verified > 0 {
            checked.push(format!("{} of {} tensor digests", found.tensors_verified, found.tensors));
        }
        if found.tags == TagCheck::Ok {
            checked.push("every encrypted chunk's tag".to_string());
        }
        writeln!(out, "{path}: ok: {}", checked.join(" and "))?;
        for k in reader.signers() {
            writeln!(out, "{path}: signed by {}", trusted.proves(k))?;
        }
    } else {
        for f in &found.failures {
            writeln!(out, "{path}: FAILED: {}", describe(f))?;
        }
        if footer_status == "mismatch" && found.tensors_verified > 0 && found.failures.len() == 1 {
            writeln!(
                out,
                "{path}: every tensor digest matches: the damage is outside the tensors' bytes \
                 (the header, the padding, an undigested tensor or the footer itself)"
            )?;
        }
    }
    out.finish()?;
    if excused && verdict == Verdict::KeyNeeded {
        out::note("the file is encrypted and no key was given (--key): its chunks' tags were not checked");
    }
    if !found.unverified.is_empty() && found.failures.is_empty() && verdict != Verdict::NothingToCheck {
        out::note(&format!(
            "{} without a digest or a checked tag, and no footer: not checked",
            out::count(found.unverified.len(), "tensor")
        ));
    }
    if found.failures.is_empty() {
        return Ok(ExitCode::Success);
    }
    Err(CheckFailed(format!("verification failed for {path}: {}", mismatched(&found.failures))).into())
}

/// One bar for verify's two passes (the footer's, over the whole file, and
/// the tensors' digests): it shows the bytes of the file both have
/// checked, so a 1.9 GiB file counts to 1.9 GiB, not to twice that.
struct Passes {
    bar: indicatif::ProgressBar,
    footer: (AtomicU64, u64),
    tensors: (AtomicU64, u64),
}

impl Passes {
    fn new(footer_bytes: u64, tensor_bytes: u64) -> Passes {
        Passes {
            bar: progress::bar(footer_bytes.max(tensor_bytes), "verifying"),
            footer: (AtomicU64::new(0), footer_bytes),
            tensors: (AtomicU64::new(0), tensor_bytes),
        }
    }

    fn footer(&self, n: u64) {
        self.footer.0.fetch_add(n, Ordering::Relaxed);
        self.show();
    }

    fn tensors(&self, n: u64) {
        self.tensors.0.fetch_add(n, Ordering::Relaxed);
        self.show();
    }

    /// The slower pass's share of the work, in bytes of the bar.
    fn show(&self) {
        let total = self.bar.length().unwrap_or(0);
        let share = |(done, of): &(AtomicU64, u64)| {
            if *of == 0 {
                return total;
            }
            (u128::from(done.load(Ordering::Relaxed).min(*of)) * u128::from(total) / u128::from(*of)) as u64
        };
        self.bar.set_position(share(&self.footer).min(share(&self.tensors)));
    }
}

/// "tensor "a" does not match", "tensors "a", "b" and the SHA-256 footer
/// do not match".
fn mismatched(failures: &[Mismatch]) -> String {
    let tensors: Vec<String> = failures.iter().filter_map(|f| f.tensor.as_ref()).map(|n| format!("{n:?}")).collect();
    let footer = failures.iter().any(|f| f.tensor.is_none());
    let mut parts = Vec::new();
    match tensors.len() {
        0 => {}
        1 => parts.push(format!("tensor {}", tensors[0])),
        _ => parts.push(format!("tensors {}", tensors.join(", "))),
    }
    if footer {
        parts.push("the SHA-256 footer".to_string());
    }
    let one = tensors.len() + usize::from(footer) == 1;
    format!("{} {} not match", parts.join(" and "), if one { "does" } else { "do" })
}
