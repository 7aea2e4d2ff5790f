//! `deathtensors inspect`: everything the header says, without reading tensors.

use std::io::Write;

use deathtensors_io::format::{hex_digest, Metadata, TensorInfo};
use deathtensors_io::{ErrorKind, ReadOptions, Reader, SignatureCovers};
use serde_json::{json, Value};

use crate::args::InspectArgs;
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::signers::Trusted;

pub fn run(args: InspectArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    if super::key::is_key_file(&args.file) {
        return super::key::show(&args.file, args.json);
    }
    if crate::sharded::is_index(ctx, &args.file) {
        return crate::sharded::inspect(ctx, &args.file, args.json);
    }
    if crate::collection::is_collection(&args.file) {
        return crate::collection::inspect(&args.file, args.json);
    }
    let reader = match ctx.open(&args.file) {
        Ok(reader) => reader,
        // inspect needs no key: one that does not open the file (or a
        // policy that refuses it) does not keep its header from being shown.
        Err(e) if key_trouble(&e) => {
            out::note(&format!("{}; shown without keys", crate::exit::one_line(&anyhow::Error::new(e))));
            ctx.open_with(&args.file, ReadOptions::default())?
        }
        Err(e) => return Err(e.into()),
    };
    let trusted = Trusted::load(&args.signer)?;
    let mut out = Out::new();
    if args.json {
        out.json(&to_json(&reader, &trusted))?;
    } else {
        write!(out, "{}", to_text(&reader, &trusted))?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// Errors of the keys given rather than of the file: no key matches, a
/// key that does not unwrap the data key, a policy that refuses. A header
/// whose MAC fails is the file's: it was changed, and that is an error.
fn key_trouble(e: &deathtensors_io::Error) -> bool {
    match e.kind() {
        // Ours: the data key; cryptotensors': a tensor's key (its header is
        // signed, and the signature verified before any key is tried).
        ErrorKind::Decrypt { what } => what == "the data key" || what.starts_with("the key of tensor"),
        kind => matches!(
            kind,
            ErrorKind::NoKey { .. }
                | ErrorKind::PolicyDenied(_)
                | ErrorKind::KdfBudget { .. }
                | ErrorKind::InvalidKey(_)
        ),
    }
}

/// Whether a sealed file's tensors (and metadata) are hidden: no key opened it.
fn hidden(reader: &Reader) -> bool {
    reader.is_sealed() && !reader.can_decrypt()
}

/// Whether the file is signed: ours carry signature records; every
/// cryptotensors file is signed (checked only with its signer's key).
fn signed(reader: &Reader) -> bool {
    !reader.signatures().is_empty() || reader.is_cryptotensors()
}

fn metadata_json(metadata: &Metadata) -> Value {
    metadata.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>().into()
}

fn totals(tensors: &[TensorInfo]) -> (u64, u64) {
    tensors.iter().fold((0, 0), |(bytes, params), t| (bytes + t.byte_len(), params + t.numel()))
}

/// Stored over raw bytes, to three decimals.
fn ratio(stored: u64, raw: u64) -> f64 {
    if raw == 0 {
        return 1.0;
    }
    (stored as f64 / raw as f64 * 1000.0).round() / 1000.0
}

/// How the file is compressed: mode, codec, level, chunk size, raw and stored
/// bytes (level and chunk size are unknown for a 0.3.0 blob).
fn compression_json(reader: &Reader) -> Value {
    let header = reader.header();
    let raw = header.raw_len();
    if let Some(c) = header.compression() {
        let stored: u64 = header.tensors().iter().map(|t| t.stored_len()).sum();
        return json!({"mode": "chunks", "codec": c.codec.name(), "level": c.level, "chunk_size": c.chunk_size,
                      "raw_bytes": raw, "stored_bytes": stored, "ratio": ratio(stored, raw)});
    }
    if reader.head().is_compressed() {
        let stored = reader.head().data_end - reader.head().data_start;
        return json!({"mode": "blob", "codec": "zstd", "level": null, "chunk_size": null,
                      "raw_bytes": header.data_len(), "stored_bytes": stored, "ratio": ratio(stored, header.data_len())});
    }
    Value::Null
}

/// Whether `reader` reads a torch.save checkpoint (io's `ConvertedSource`).
fn is_pickle(reader: &Reader) -> bool {
    crate::remote::url(reader.path()).is_none() && deathtensors_io::is_torch_checkpoint(reader.path())
}

/// Whether `reader` reads a numpy `.npy` or `.npz` (io's `ConvertedSource`).
fn is_numpy(reader: &Reader) -> bool {
    crate::remote::url(reader.path()).is_none() && deathtensors_io::is_numpy_file(reader.path())
}

fn to_json(reader: &Reader, trusted: &Trusted) -> Value {
    let header = reader.header();
    let (total_bytes, parameters) = totals(header.tensors());
    let tensors: Vec<Value> = header
        .tensors()
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "nbytes": t.byte_len(),
                "data_offsets": [t.data_offsets.0, t.data_offsets.1],
                "metadata": metadata_json(&t.metadata),
                "sha256": t.sha256.as_deref().map(hex_digest),
                "compression": header.chunk_table(i).map(|c| json!({
                    "stored_bytes": t.stored_len(), "chunks": c.len(), "ratio": ratio(t.stored_len(), t.byte_len()),
                })),
            })
        })
        .collect();
    json!({
        "path": reader.path().to_string_lossy(),
        "format": if is_pickle(reader) {
            "torch"
        } else if is_numpy(reader) {
            "numpy"
        } else {
            out::format_name(header.format())
        },
        "flags": {
            "checksum": reader.has_footer(),
            "compressed": reader.is_compressed(),
            "encrypted": reader.is_encrypted(),
            "cryptotensors": reader.is_cryptotensors(),
            "sealed": reader.is_sealed(),
            "signed": signed(reader),
        },
        "compression": compression_json(reader),
        "encryption": reader.encryption_info().map(|e| json!({
            "scheme": e.scheme,
            "cipher": e.cipher,
            "chunk_size": e.chunk_size,
            "recipients": e.recipients.iter().map(|(kind, kid)| json!({"kind": kind, "kid": kid})).collect::<Vec<_>>(),
            "encrypted_tensors": e.encrypted_tensors,
            "signer_kid": e.signer_kid,
        })),
        "signers": reader.signers().iter().map(|k| k.fingerprint()).collect::<Vec<_>>(),
        "signer_keys": reader.signers().iter().map(|k| trusted.to_json(k)).collect::<Vec<_>>(),
        "signature_covers": reader.signature_covers().map(|c| c.as_str()),
        "policy": reader.policy(),
        "tensors_hidden": hidden(reader),
        "created_by": header.created_by(),
        "alignment": header.alignment(),
        "metadata": header.metadata().map(metadata_json),
        "data_start": reader.head().data_start,
        "file_bytes": reader.file_len(),
        "tensors": tensors,
        "total_bytes": total_bytes,
        "parameters": parameters,
    })
}

fn to_text(reader: &Reader, trusted: &Trusted) -> String {
    let header = reader.header();
    let (total_bytes, parameters) = totals(header.tensors());
    let mut about = vec![vec!["file".to_string(), reader.path().display().to_string()]];
    let mut format = out::format_name(header.format()).to_string();
    if is_pickle(reader) {
        format = "torch.save pickle, read without running it (shown as the safetensors file it converts to)".into();
    } else if is_numpy(reader) {
        format = "numpy .npy/.npz, read without numpy (shown as the safetensors file it converts to)".into();
    }
    if let Some(by) = header.created_by() {
        format.push_str(&format!(" (created by {by})"));
    }
    about.push(vec!["format".into(), format]);
    let mut flags = Vec::new();
    if reader.has_footer() {
        flags.push("checksum (SHA-256 footer)");
    }
    if reader.head().is_compressed() {
        flags.push("compressed (one zstd frame, deathtensors 0.3.0)");
    }
    if reader.head().is_chunk_compressed() {
        flags.push("compressed (per tensor, zstd chunks)");
    }
    if reader.is_sealed() {
        flags.push(if reader.can_decrypt() {
            "encrypted, sealed header (unsealed with the key)"
        } else {
            "encrypted, sealed header"
        });
    } else if reader.is_cryptotensors() {
        flags.push("encrypted (cryptotensors)");
    } else if reader.is_encrypted() {
        flags.push("encrypted");
    }
    if signed(reader) {
        flags.push("signed");
    }
    about.push(vec!["flags".into(), if flags.is_empty() { "none".into() } else { flags.join(", ") }]);
    if let Some(e) = reader.encryption_info() {
        let mut how = match e.chunk_size {
            Some(chunk) => format!("{}, chunks of {}", e.cipher, out::size(chunk)),
            None => format!("{}, one AEAD message per tensor", e.cipher),
        };
        if e.scheme == "cryptotensors" {
            how.push_str(&format!(
                "; cryptotensors, {} of {} encrypted",
                e.encrypted_tensors,
                out::count(header.len(), "tensor")
            ));
        }
        about.push(vec!["encryption".into(), how]);
        for (i, (kind, kid)) in e.recipients.iter().enumerate() {
            let label = if i == 0 { "recipients" } else { "" };
            let who = match kid {
                Some(kid) => format!("{kind} key {kid:?}"),
                None if *kind == "symmetric" => "a symmetric key (no key id)".to_string(),
                None => "a passphrase (Argon2id)".to_string(),
            };
            about.push(vec![label.into(), who]);
        }
        if reader.signers().is_empty() && e.scheme == "cryptotensors" {
            let kid = e.signer_kid.as_deref().map_or("no key id".to_string(), |k| format!("key id {k:?}"));
            about.push(vec![
                "signed by".into(),
                format!("Ed25519 {kid} (not checked: give its key, --key; it would cover the header only)"),
            ]);
        }
    }
    // Who signed (trusted or not), and what a valid signature covers, said plainly.
    for (i, k) in reader.signers().iter().enumerate() {
        let label = if i == 0 { "signed by" } else { "" };
        about.push(vec![label.into(), trusted.proves_checked(k, "header signature verified")]);
    }
    if !reader.signers().is_empty() {
        let covers = match reader.signature_covers() {
            Some(SignatureCovers::Header) => {
                "the header only; cryptotensors signs no digest of the data, so a holder of the master key can \
                 change tensor bytes"
            }
            _ => "the header, and every tensor through its digests, checked on every read",
        };
        about.push(vec!["signature covers".into(), covers.into()]);
        // inspect reads the header only: it says so, not more.
        about.push(vec![
            "checked here".into(),
            "the header and its signature; no tensor byte was read (`deathtensors verify` checks every tensor)".into(),
        ]);
    }
    // Decoded once: for a cryptotensors file it parses every tensor's entry.
    let policy = reader.policy();
    if let Some(policy) = &policy {
        for (i, line) in policy.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            about.push(vec![if i == 0 { "policy (Rego)" } else { "" }.into(), line.trim_end().to_string()]);
        }
    }
    if let Value::Object(c) = compression_json(reader) {
        let raw = c.get("raw_bytes").and_then(Value::as_u64).unwrap_or(0);
        let stored = c.get("stored_bytes").and_then(Value::as_u64).unwrap_or(0);
        let mut how =
            format!("zstd, {} stored for {} raw: ratio {:.3}", out::size(stored), out::size(raw), ratio(stored, raw));
        if let (Some(level), Some(chunk)) =
            (c.get("level").and_then(Value::as_u64), c.get("chunk_size").and_then(Value::as_u64))
        {
            how.push_str(&format!(", level {level}, chunks of {}", out::size(chunk)));
        }
        about.push(vec!["compression".into(), how]);
    }
    about.push(vec!["alignment".into(), header.alignment().to_string()]);
    let data = format!(
        "bytes {}..{} of {} ({})",
        reader.head().data_start,
        reader.head().data_end,
        reader.file_len(),
        out::size(reader.file_len())
    );
    about.push(vec!["data".into(), data]);
    // A cryptotensors file's own fields and our policy are shown above.
    let shown_above = |k: &str| {
        (reader.is_cryptotensors() && deathtensors_io::format::CT_RESERVED.contains(&k))
            || (k == deathtensors_io::format::CT_POLICY && policy.is_some())
    };
    match header.metadata() {
        _ if hidden(reader) => {
            about.push(vec!["metadata".into(), "hidden (sealed header: give its key, --key)".into()])
        }
        None => about.push(vec!["metadata".into(), "none".into()]),
        Some(m) if m.is_empty() => about.push(vec!["metadata".into(), "{}".into()]),
        Some(m) => {
            let mut rows = 0;
            for (k, v) in m.iter().filter(|(k, _)| !shown_above(k)) {
                let label = if rows == 0 { "metadata" } else { "" };
                about.push(vec![label.into(), format!("{k} = {v}").replace(['\n', '\r'], " ")]);
                rows += 1;
            }
            if rows == 0 {
                about.push(vec!["metadata".into(), "none besides the above".into()]);
            }
        }
    }
    let digests = header.tensors().iter().filter(|t| t.sha256.is_some()).count();
    let tensors = if hidden(reader) {
        "hidden (sealed header: give its key, --key)".to_string()
    } else {
        format!(
            "{}, {total_bytes} bytes ({}), {} parameters, {digests} with a sha256 digest",
            out::count(header.len(), "tensor"),
            out::size(total_bytes),
            out::quantity(parameters)
        )
    };
    about.push(vec!["tensors".into(), tensors]);
    let mut text = out::table(&about);
    if header.is_empty() {
        return text;
    }
    let chunked = header.compression().is_some();
    let mut head = vec!["name", "dtype", "shape", "size", "offsets", "sha256", "metadata"];
    if chunked {
        head.insert(4, "stored");
    }
    let mut rows = vec![head.into_iter().map(String::from).collect::<Vec<_>>()];
    for (i, t) in header.tensors().iter().enumerate() {
        let metadata: Vec<String> = t.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut row = vec![
            t.name.to_string(),
            t.dtype.name().into(),
            out::shape(&t.shape),
            out::size(t.byte_len()),
            format!("{}..{}", t.data_offsets.0, t.data_offsets.1),
            if t.sha256.is_some() { "yes" } else { "-" }.into(),
            metadata.join(", "),
        ];
        if chunked {
            let stored = match header.chunk_table(i) {
                Some(_) => format!("{} ({:.3})", out::size(t.stored_len()), ratio(t.stored_len(), t.byte_len())),
                None => "raw".into(),
            };
            row.insert(4, stored);
        }
        rows.push(row);
    }
    text.push('\n');
    text.push_str(&out::table(&rows));
    text
}
