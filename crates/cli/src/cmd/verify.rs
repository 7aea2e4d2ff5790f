//! `deathtensors verify`: the SHA-256 footer and every per-tensor digest, on
//! all cores, naming each tensor or byte range that does not match.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use deathtensors_io::format::hex_digest;
use deathtensors_io::ErrorKind;
use serde_json::{json, Value};

use crate::args::VerifyArgs;
use crate::context::RunContext;
use crate::exit::{CheckFailed, ExitCode};
use crate::out::{self, Out};
use crate::progress;
use crate::signers::Trusted;
use crate::verdict::{report_json, unsigned_tensors};

/// A digest that does not match: the tensor (or `None` for the footer), the
/// file's byte range it covers, and the two digests.
struct Mismatch {
    tensor: Option<String>,
    range: (u64, u64),
    expected: [u8; 32],
    actual: [u8; 32],
}

impl Mismatch {
    fn describe(&self) -> String {
        let (start, end) = self.range;
        let (expected, actual) = (hex_digest(&self.expected), hex_digest(&self.actual));
        match &self.tensor {
            Some(name) => format!(
                "tensor {name:?} (file bytes {start}..{end}) is corrupt: header says sha256 {expected}, bytes hash to {actual}"
            ),
            None => format!(
                "SHA-256 footer mismatch over file bytes {start}..{end} (header and data): footer says {expected}, contents hash to {actual}"
            ),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "tensor": self.tensor,
            "range": [self.range.0, self.range.1],
            "expected": hex_digest(&self.expected),
            "actual": hex_digest(&self.actual),
        })
    }
}

/// With `--json`, a failure before the report (a signature or requirement
/// at open, a tag that does not verify) is still one JSON document on
/// stdout, `ok` false; the error goes on as usual (stderr, exit code).
fn report(args: &VerifyArgs, err: anyhow::Error) -> anyhow::Error {
    report_json(&args.file, args.json, err)
}

pub fn run(args: VerifyArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    if crate::collection::is_collection(&args.file) {
        return crate::collection::verify(&args.file, args.allow_missing, args.json);
    }
    let options = ctx.read_options_requiring(&args.signer, args.require_signature)?;
    if crate::sharded::is_index_requiring(ctx, &args.file, &options) {
        return crate::sharded::verify(ctx, &args, options);
    }
    // Signatures and requirements are checked at open (the one that
    // `is_index_requiring` made, for a URL).
    let reader = ctx.open_kept_or(&args.file, || options).map_err(|e| report(&args, e.into()))?;
    let path = args.file.display();
    let trusted = Trusted::load(&args.signer)?;
    let signers: Vec<String> = reader.signers().iter().map(|k| k.fingerprint()).collect();
    // A key holder checks every tag of an encrypted file: every chunk decrypts.
    let tags = if reader.can_decrypt() {
        let total = reader.header().tensors().iter().map(|t| t.byte_len()).sum();
        let bar = progress::bar(total, "decrypting");
        reader.verify_tags(|n| bar.inc(n)).map_err(|e| report(&args, e.into()))?;
        bar.finish_and_clear();
        "ok"
    } else if reader.is_encrypted() {
        "not checked (no key)"
    } else {
        "absent"
    };
    let header = reader.header();
    let digested: Vec<_> = header.tensors().iter().filter(|t| t.sha256.is_some()).collect();
    let footer = reader.head().checksummed();
    // Tensors nothing checked: no footer, no digest, and no tag checked
    // (a tensor in the clear in a partly encrypted cryptotensors file has
    // none, and its signature covers only the header).
    let unverified: Vec<&str> = header
        .tensors()
        .iter()
        .filter(|t| footer.is_none() && t.sha256.is_none() && !(tags == "ok" && reader.is_tensor_encrypted(&t.name)))
        .map(|t| t.name.as_str())
        .collect();
    let signature_required = args.require_signature || !args.signer.is_empty();
    if signature_required {
        unsigned_tensors(&reader).map_err(|e| report_json(&args.file, args.json, e))?;
    }
    let mut out = Out::new();

    if footer.is_none() && digested.is_empty() && tags != "ok" {
        if !args.allow_missing {
            let why = if reader.is_encrypted() && !signers.is_empty() {
                let all_trusted = reader.signers().iter().all(|k| trusted.trusts(k));
                format!(
                    "the signature of {} {}, but nothing checks the tensors' \
                     bytes without a key (no SHA-256 footer, no tensor digests; the chunks' tags need --key)",
                    reader.signers().iter().map(|k| trusted.name(k)).collect::<Vec<_>>().join(", "),
                    if all_trusted { "verifies (a key you trust)" } else { "is valid (its key is not trusted)" }
                )
            } else if reader.is_encrypted() {
                "the file has no SHA-256 footer and no tensor digests, and its chunks' tags need a key (--key)".into()
            } else {
                "the file has no SHA-256 footer and no tensor digests".into()
            };
            let err =
                CheckFailed(format!("{path}: no checksum to verify: {why} (pass --allow-missing to accept that)"));
            return Err(report(&args, err.into()));
        }
        if args.json {
            out.json(&json!({
                "path": args.file.to_string_lossy(),
                "ok": true,
                "footer": "absent",
                "tensors_verified": 0,
                "unverified": unverified,
                "failures": [],
            }))?;
        } else {
            writeln!(out, "{path}: no checksum to verify (allowed by --allow-missing)")?;
        }
        out.finish()?;
        return Ok(ExitCode::Success);
    }

    let footer_bytes = footer.map_or(0, |(start, end)| end - start);
    let tensor_bytes: u64 = digested.iter().map(|t| t.byte_len()).sum();
    // The footer's pass and the digests' pass read the same bytes twice:
    // the bar counts the file's bytes, as far as both passes have come.
    let passes = Passes::new(footer_bytes, tensor_bytes);
    let (footer_result, tensor_results) = std::thread::scope(|s| {
        // The footer is one sequential pass, on its own thread while the
        // tensors are hashed on the other cores.
        let footer_job = footer.map(|_| s.spawn(|| reader.verify_footer_with(|n| passes.footer(n))));
        // The digests: two streams per core where the CPU allows.
        let names: Vec<&str> = digested.iter().map(|t| t.name.as_str()).collect();
        let tensors = reader.compute_digests(&names, |n| passes.tensors(n)).map(|actual| {
            digested
                .iter()
                .zip(actual)
                .filter_map(|(t, actual)| {
                    let expected = *t.sha256.as_deref()?;
                    (actual != expected).then(|| {
                        let start = reader.head().data_start + t.data_offsets.0;
                        Mismatch {
                            tensor: Some(t.name.to_string()),
                            range: (start, start + t.stored_len()),
                            expected,
                            actual,
                        }
                    })
                })
                .collect::<Vec<_>>()
        });
        let footer = footer_job.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (footer, tensors)
    });
    passes.bar.finish_and_clear();

    let mut failures: Vec<Mismatch> = tensor_results?;
    let footer_status = match (footer_result, footer) {
        (None, _) | (_, None) => "absent",
        (Some(Ok(())), _) => "ok",
        (Some(Err(e)), Some(range)) => match e.kind() {
            ErrorKind::ChecksumMismatch { expected, actual } => {
                failures.push(Mismatch { tensor: None, range, expected: *expected, actual: *actual });
                "mismatch"
            }
            _ => return Err(e.into()),
        },
    };

    if args.json {
        out.json(&json!({
            "path": args.file.to_string_lossy(),
            "ok": failures.is_empty(),
            "footer": footer_status,
            "tensors_verified": digested.len(),
            "unverified": unverified,
            "tags": tags,
            "signers": signers,
            "signer_keys": reader.signers().iter().map(|k| trusted.to_json(k)).collect::<Vec<_>>(),
            "failures": failures.iter().map(Mismatch::to_json).collect::<Vec<_>>(),
        }))?;
    } else if failures.is_empty() {
        let mut checked = Vec::new();
        if let Some((start, end)) = footer {
            checked.push(format!("SHA-256 footer over bytes {start}..{end}"));
        }
        if !digested.is_empty() {
            checked.push(format!("{} of {} tensor digests", digested.len(), header.len()));
        }
        if tags == "ok" {
            checked.push("every encrypted chunk's tag".to_string());
        }
        writeln!(out, "{path}: ok: {}", checked.join(" and "))?;
        for k in reader.signers() {
            writeln!(out, "{path}: signed by {}", trusted.proves(k))?;
        }
    } else {
        for f in &failures {
            writeln!(out, "{path}: FAILED: {}", f.describe())?;
        }
        if footer_status == "mismatch" && !digested.is_empty() && failures.len() == 1 {
            writeln!(
                out,
                "{path}: every tensor digest matches: the damage is outside the tensors' bytes \
                 (the header, the padding, an undigested tensor or the footer itself)"
            )?;
        }
    }
    out.finish()?;
    if reader.is_encrypted() && tags != "ok" && failures.is_empty() {
        out::note("the file is encrypted and no key was given (--key): its chunks' tags were not checked");
    }
    if !unverified.is_empty() && failures.is_empty() {
        out::note(&format!(
            "{} without a digest or a checked tag, and no footer: not checked",
            out::count(unverified.len(), "tensor")
        ));
    }
    if failures.is_empty() {
        return Ok(ExitCode::Success);
    }
    Err(CheckFailed(format!("verification failed for {path}: {}", mismatched(&failures))).into())
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
