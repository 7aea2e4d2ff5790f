//! `deathtensors meta`: print global metadata, or change it by rewriting the
//! file atomically.

use std::io::Write;

use anyhow::bail;
use deathtensors_io::format::{Format, Metadata, TensorInfo, TensorSpec};
use deathtensors_io::WriteOptions;
use serde_json::Value;

use crate::args::MetaArgs;
use crate::context::RunContext;
use crate::copy;
use crate::exit::ExitCode;
use crate::out::{self, Out};

pub fn run(args: MetaArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    let reader = ctx.open(&args.file)?;
    let changing = !args.set.is_empty() || !args.delete.is_empty();
    if changing && (reader.is_encrypted() || !reader.signatures().is_empty()) {
        anyhow::bail!(
            "{}: meta cannot rewrite an encrypted or signed file (the header is authenticated; rewriting it \
             would drop the encryption or the signatures)",
            args.file.display()
        );
    }
    let header = reader.header();
    let before = header.metadata().cloned();
    let mut after = before.clone().unwrap_or_default();
    for key in &args.delete {
        if args.set.iter().any(|(k, _)| k == key) {
            bail!("--delete {key} and --set {key}=...: choose one");
        }
        if after.remove(key).is_none() {
            out::warn(&format!("{}: no metadata key {key:?} to delete", args.file.display()));
        }
    }
    for (key, value) in &args.set {
        after.insert(key.clone(), value.clone());
    }
    // safetensors: no `__metadata__` at all rather than an empty one.
    let after = match header.format() {
        Format::Safetensors if after.is_empty() => None,
        _ => Some(after),
    };

    let editing = !args.set.is_empty() || !args.delete.is_empty();
    let changed = editing
        && (after.as_ref().unwrap_or(&Metadata::new()) != before.as_ref().unwrap_or(&Metadata::new())
            || (header.format() == Format::Safetensors && after.is_none() != before.is_none()));
    if changed {
        if reader.is_compressed() {
            bail!(
                "cannot rewrite {}: it is zstd-compressed (deathtensors 0.2/0.3), which this version does not \
                 write; convert it first (deathtensors convert IN OUT)",
                args.file.display()
            );
        }
        let specs: Vec<TensorSpec> = header.tensors().iter().map(TensorInfo::to_spec).collect();
        let options = WriteOptions {
            format: header.format(),
            alignment: header.alignment(),
            // A file with a checksum keeps one; the writer recomputes it.
            checksum: reader.has_footer() || header.tensors().iter().any(|t| t.sha256.is_some()),
            metadata: after.clone(),
            // `created_by` names the writer of the bytes: this version.
            ..WriteOptions::default()
        };
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        crate::integrity::footer_for(&reader, &names)?;
        copy::copy(reader, &args.file, specs, &options)?;
    }

    let shown = after.unwrap_or_default();
    let mut out = Out::new();
    if args.json {
        let map: serde_json::Map<String, Value> = shown.iter().map(|(k, v)| (k.clone(), v.as_str().into())).collect();
        out.json(&map.into())?;
    } else if !editing {
        for (k, v) in &shown {
            writeln!(out, "{k}={v}")?;
        }
    } else if changed {
        writeln!(out, "{}: metadata updated ({} keys)", args.file.display(), shown.len())?;
    } else {
        writeln!(out, "{}: metadata unchanged", args.file.display())?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}
