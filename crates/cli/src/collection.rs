//! Collections (directories of rows, ours or tensorblob's) in `inspect`,
//! `verify` and `convert`; `deathtensors blob` is in `cmd/blob.rs`.

use std::io::Write;
use std::path::Path;

use deathtensors_io::format::{hex_digest, Format};
use deathtensors_io::{detect_collection, Collection, CollectionKind, WriteOptions};
use serde_json::{json, Value};

use crate::exit::{CheckFailed, ExitCode};
use crate::out::{self, Out};

/// Whether `path` is a collection directory (ours or tensorblob's).
pub fn is_collection(path: &Path) -> bool {
    path.is_dir() && detect_collection(path).is_ok()
}

fn kind_name(c: &Collection) -> &'static str {
    match c.kind() {
        CollectionKind::Deathtensors => "deathtensors collection",
        CollectionKind::Tensorblob => "tensorblob directory, read-only",
    }
}

/// Bytes the block files take on disk (allocated, so sparse blocks count
/// what they hold).
fn on_disk(c: &Collection) -> u64 {
    c.blocks()
        .iter()
        .filter_map(|b| std::fs::metadata(&b.path).ok())
        .map(|m| {
            #[cfg(unix)]
            {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512
            }
            #[cfg(not(unix))]
            {
                m.len()
            }
        })
        .sum()
}

pub fn inspect(path: &Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let c = Collection::open(path)?;
    let layout = c.layout();
    let blocks = c.blocks();
    let digests = blocks.iter().filter(|b| b.sha256.is_some()).count();
    let data = c.rows() * layout.row_bytes();
    let mut out = Out::new();
    if as_json {
        let list: Vec<Value> = blocks
            .iter()
            .map(|b| {
                json!({
                    "file": b.path.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "rows": b.rows,
                    "sha256": b.sha256.as_ref().map(hex_digest),
                })
            })
            .collect();
        out.json(&json!({
            "path": path.to_string_lossy(),
            "kind": match c.kind() { CollectionKind::Deathtensors => "deathtensors", CollectionKind::Tensorblob => "tensorblob" },
            "rows": c.rows(),
            "dtype": layout.dtype.name(),
            "row_shape": layout.shape,
            "row_bytes": layout.row_bytes(),
            "block_rows": layout.block_rows,
            "data_bytes": data,
            "disk_bytes": on_disk(&c),
            "generation": c.generation(),
            "metadata": c.metadata(),
            "blocks": list,
        }))?;
    } else {
        let rows = vec![
            vec!["collection".into(), format!("{} ({})", path.display(), kind_name(&c))],
            vec!["rows".into(), c.rows().to_string()],
            vec!["dtype".into(), layout.dtype.name().into()],
            vec!["row shape".into(), out::shape(&layout.shape)],
            vec!["row bytes".into(), layout.row_bytes().to_string()],
            vec!["block rows".into(), layout.block_rows.to_string()],
            vec!["blocks".into(), format!("{} ({digests} with a sha256)", blocks.len())],
            vec!["data".into(), format!("{} ({} on disk)", out::size(data), out::size(on_disk(&c)))],
            vec!["generation".into(), c.generation().to_string()],
        ];
        write!(out, "{}", out::table(&rows))?;
        for (k, v) in c.metadata() {
            writeln!(out, "metadata    {k}={v}")?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

pub fn verify(path: &Path, allow_missing: bool, as_json: bool) -> anyhow::Result<ExitCode> {
    let c = Collection::open(path)?;
    let display = path.display();
    let hashed = match c.verify() {
        Ok(n) => n,
        Err(e) if e.is_invalid_file() || matches!(e.kind(), deathtensors_io::ErrorKind::InvalidInput(_)) => {
            return Err(CheckFailed(format!("{display}: FAILED: {e}")).into())
        }
        Err(e) => return Err(e.into()),
    };
    let infos = c.blocks();
    let blocks = infos.len();
    let block_rows = c.layout().block_rows;
    // A partial block (the last, growing) has no digest until it is full:
    // its header and size are all there is to check, and that is not a
    // missing checksum. Full blocks without a digest are.
    let partial = infos.iter().filter(|b| b.rows < block_rows).count() as u64;
    let undigested_full = infos.iter().filter(|b| b.rows == block_rows && b.sha256.is_none()).count();
    if hashed == 0 && undigested_full > 0 && !allow_missing {
        return Err(CheckFailed(format!(
            "{display}: {} check out, but {} carry no digest to verify (pass --allow-missing to accept that)",
            out::count(blocks, "block"),
            out::count(undigested_full, "full block"),
        ))
        .into());
    }
    let mut out = Out::new();
    if as_json {
        let checked = json!({
            "rows": c.rows(), "blocks": blocks, "blocks_hashed": hashed, "blocks_partial": partial,
        });
        out.json(&crate::verdict::Report::ok(path, crate::verdict::Kind::Collection, checked).to_json())?;
    } else {
        let unhashed = blocks as u64 - hashed;
        let note = match (partial, unhashed - partial) {
            (0, 0) => String::new(),
            (p, 0) => format!(
                "; {} (fewer than {block_rows} rows: no digest until it is full) checked for structure only \
                 (header, size)",
                if p == 1 { "1 partial block".to_string() } else { format!("{p} partial blocks") }
            ),
            (p, d) => {
                format!("; {p} partial and {d} digest-less full block(s) checked for structure only (header, size)")
            }
        };
        writeln!(
            out,
            "{display}: ok: {} rows in {}, {hashed} SHA-256 verified{note}",
            c.rows(),
            out::count(blocks, "block")
        )?;
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// `convert` of a collection: to a new collection (OUT without a file
/// extension: tensorblob's directories become ours), or exported as one
/// tensor `rows` of a deathtensors or safetensors file.
pub fn convert(
    input: &Path,
    output: &Path,
    format: Option<Format>,
    checksum: bool,
    block_rows: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let c = Collection::open(input)?;
    let mut out = Out::new();
    match format {
        None => {
            let rows = copy_collection(&c, output, block_rows)?;
            writeln!(out, "{} -> {}: {rows} rows, collection written", input.display(), output.display())?;
        }
        Some(format) => {
            let options = WriteOptions { format, checksum, ..WriteOptions::default() };
            c.export(0..c.rows(), "rows", output, &options)?;
            writeln!(
                out,
                "{} -> {}: {} rows as tensor \"rows\" of a {} file",
                input.display(),
                output.display(),
                c.rows(),
                out::format_name(format)
            )?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// Copies `c` into a new collection at `output`, in one commit.
pub fn copy_collection(c: &Collection, output: &Path, block_rows: Option<u64>) -> anyhow::Result<u64> {
    Ok(deathtensors_io::convert_collection(c, output, block_rows)?)
}
