//! Consolidation: each tensor's chunks read tile by tile from the rank
//! files (each tile checked against its digest) and put together, then
//! written as one file or as a Hugging Face sharded checkpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use deathtensors_format::{Format, Metadata, TensorSpec};
use serde_json::{Map, Value};

use super::document::{parse, tile_block_name, Document, Tensor, MAX_METADATA_BYTES};
use super::source::{CheckpointDir, CheckpointSource};
use crate::error::{Error, ErrorKind, Result};
use crate::file::reader::Reader;
use crate::file::writer::save;
use crate::fs::staged::StagedFiles;
use crate::options::WriteOptions;
use deathtensors_format::DCP_METADATA;

const DOING: &str = "cannot consolidate";
/// Hugging Face's default largest shard.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5 << 30;

/// What `consolidate` writes.
#[derive(Clone, Debug)]
pub struct ConsolidateOptions {
    /// For a directory output, the largest shard (a larger tensor gets a
    /// shard of its own). Default 5 GiB.
    pub max_shard_bytes: u64,
    /// For a single file: safetensors, or deathtensors with per-tensor
    /// SHA-256. Default: safetensors if the name ends in `.safetensors`.
    pub format: Option<Format>,
    /// fsync the outputs. Default true.
    pub durable: bool,
}

impl Default for ConsolidateOptions {
    fn default() -> ConsolidateOptions {
        ConsolidateOptions { max_shard_bytes: DEFAULT_MAX_SHARD_BYTES, format: None, durable: true }
    }
}

/// Rank files opened and checked on first use.
struct RankFiles<'a> {
    source: &'a dyn CheckpointSource,
    doc: &'a Document,
    open: HashMap<String, Reader>,
}

impl RankFiles<'_> {
    /// What errors name for the rank file `name`.
    fn path(&self, name: &str) -> PathBuf {
        self.source.name_of(name)
    }

    fn get(&mut self, name: &str) -> Result<&Reader> {
        if !self.open.contains_key(name) {
            let path = self.path(name);
            let reader = self.source.open(name)?;
            let (rank, size) = self.doc.files[name];
            check_rank_file(&reader, name, rank, size).map_err(|why| Error::checkpoint(why, &path, DOING))?;
            self.open.insert(name.to_string(), reader);
        }
        Ok(&self.open[name])
    }
}

/// Copies `block` (contiguous, of shape `shape`) into `full` (contiguous,
/// of shape `size`) at `offsets`, elements of `elem` bytes.
fn place(full: &mut [u8], size: &[u64], block: &[u8], shape: &[u64], offsets: &[u64], elem: u64) {
    let n = shape.len();
    if n == 0 {
        full.copy_from_slice(block);
        return;
    }
    let run = (shape[n - 1] * elem) as usize;
    if run == 0 || shape.contains(&0) {
        return;
    }
    // Strides (in bytes) of the full tensor.
    let mut stride = vec![elem; n];
    for d in (0..n - 1).rev() {
        stride[d] = stride[d + 1] * size[d + 1];
    }
    let mut index = vec![0u64; n - 1];
    for src in block.chunks_exact(run) {
        let dst: u64 = (0..n).map(|d| (offsets[d] + index.get(d).copied().unwrap_or(0)) * stride[d]).sum();
        full[dst as usize..dst as usize + run].copy_from_slice(src);
        // The next row: an odometer over all dimensions but the last.
        for d in (0..n - 1).rev() {
            index[d] += 1;
            if index[d] < shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The full bytes of tensor `fqn`, read tile by tile, each checked.
fn assemble(fqn: &str, t: &Tensor, files: &mut RankFiles<'_>) -> Result<Vec<u8>> {
    let elem = t.dtype.bits() / 8;
    let mut full = vec![0u8; t.byte_len() as usize];
    for c in &t.chunks {
        for (i, tile) in c.tiles().into_iter().enumerate() {
            let reader = files.get(&c.file)?;
            let name = tile_block_name(fqn, c, tile);
            let bytes = match &c.sha256 {
                None => reader.read_verified(&name)?,
                Some(digests) => {
                    let bytes = reader.read(&name)?;
                    let actual = crate::fs::hash::sha256(&bytes);
                    let hex = actual.iter().map(|b| format!("{b:02x}")).collect::<String>();
                    if hex != digests[i] {
                        let path = files.path(&c.file);
                        let kind = match parse_digest(&digests[i]) {
                            Some(expected) => {
                                ErrorKind::TensorDigestMismatch { tensor: name.clone(), expected, actual }
                            }
                            None => ErrorKind::InvalidCheckpoint(format!(
                                "tensor {name:?}: malformed SHA-256 in the metadata"
                            )),
                        };
                        return Err(Error::new(kind, Some(&path), DOING));
                    }
                    bytes
                }
            };
            let (shape, within) = c.tile_box(tile);
            // Fits: the tile lies in the chunk, the chunk in the tensor.
            let want = shape.iter().product::<u64>() * elem;
            if bytes.len() as u64 != want {
                return Err(Error::checkpoint(
                    format!("tile {name:?} is {} bytes, its chunk needs {want}", bytes.len()),
                    &files.path(&c.file),
                    DOING,
                ));
            }
            let at: Vec<u64> = c.offsets.iter().zip(&within).map(|(o, w)| o + w).collect();
            place(&mut full, &t.size, &bytes, &shape, &at, elem);
        }
    }
    Ok(full)
}

/// Reads the checkpoint's metadata, checked; a checkpoint with rank files
/// and no metadata is named incomplete.
fn read_document(source: &dyn CheckpointSource) -> Result<Document> {
    let dir = source.location();
    let Some(data) = source.read_metadata(MAX_METADATA_BYTES)? else {
        let names = source.names()?;
        if let Some(doc) = names.iter().find(|n| super::parse_rank_metadata_name(n).is_some()) {
            let why = format!(
                "no {DCP_METADATA}: this checkpoint was saved without collectives, each rank's on its own ({doc}, ...); \
                 there is no global view to consolidate: load each rank's with deathtensors.distributed.StorageReader"
            );
            return Err(Error::checkpoint(why, dir, DOING));
        }
        let ranks = names.iter().any(|n| super::parse_rank_file_name(n).is_some());
        return Err(if ranks {
            let why = format!("incomplete checkpoint: rank files but no {DCP_METADATA} (a save that did not commit)");
            Error::checkpoint(why, dir, DOING)
        } else {
            Error::input(format!("no checkpoint: {DCP_METADATA} is missing"), dir, DOING)
        });
    };
    parse(&data).map_err(|why| {
        Error::checkpoint(format!("invalid checkpoint metadata: {why}"), &source.name_of(DCP_METADATA), DOING)
    })
}

/// Writes the full tensors of the distributed checkpoint in the directory
/// `checkpoint` to `out`, and returns the paths written.
///
/// `out` an existing directory, or a path ending in `/`: a Hugging Face
/// sharded checkpoint (`model-0000k-of-0000n.safetensors` of at most
/// [`ConsolidateOptions::max_shard_bytes`] each, in name order, and
/// `model.safetensors.index.json`). Otherwise one file (safetensors if its
/// name ends in `.safetensors` or the options say so, else deathtensors
/// with per-tensor SHA-256) whose metadata holds the non-tensor values as
/// JSON (`dcp.values`). Memory: one output shard (the whole model for one
/// file) plus one block.
///
/// # Errors
/// - `InvalidInput` for a missing, incomplete or invalid metadata document,
///   a rank file of another checkpoint or of the wrong size, a block of
///   the wrong length or a safetensors block whose SHA-256 differs, a
///   complex128 tensor bound for safetensors.
/// - As [`Reader::open`] and [`Reader::read_verified`] for the rank files
///   (missing, damaged, a digest mismatch), and as [`save`] for the outputs.
pub fn consolidate(checkpoint: &Path, out: &Path, options: &ConsolidateOptions) -> Result<Vec<PathBuf>> {
    consolidate_from(&CheckpointDir::new(checkpoint), out, options)
}

/// [`consolidate`] of the checkpoint whose files `source` reads: a local
/// directory ([`CheckpointDir`]) or a prefix of an object store
/// (`deathtensors-remote`'s `RemoteCheckpoint`). The output is local.
/// Every check of [`consolidate`] runs, whatever the source: the
/// metadata's fields, the rank files' lengths (asked of the source before
/// any tensor's buffer is allocated), each rank file's length, save id and
/// rank once opened, each block's digest. Errors name the source's
/// location joined with the file's name (a path, or a URL).
///
/// # Errors
/// As [`consolidate`], and as the source's methods.
pub fn consolidate_from(
    source: &dyn CheckpointSource,
    out: &Path,
    options: &ConsolidateOptions,
) -> Result<Vec<PathBuf>> {
    if options.format == Some(Format::Bintensors) {
        let why = "a checkpoint consolidates to deathtensors or safetensors, not bintensors".to_string();
        return Err(Error::input(why, out, DOING));
    }
    let doc = read_document(source)?;
    // The rank files must hold every tensor's bytes: checked before any
    // buffer is allocated, so a hostile size cannot ask for more memory
    // than the checkpoint has bytes.
    let mut stored = 0u64;
    let mut names: Vec<&String> = doc.files.keys().collect();
    // In name order, so the first missing file named is always the same.
    names.sort();
    for name in names {
        stored = stored.saturating_add(source.file_len(name)?);
    }
    if let Some((fqn, t)) = doc.tensors.iter().find(|(_, t)| t.byte_len() > stored) {
        return Err(Error::checkpoint(
            format!(
                "invalid checkpoint metadata: tensor {fqn:?} needs {} bytes, its rank files hold {stored}",
                t.byte_len()
            ),
            &source.name_of(DCP_METADATA),
            DOING,
        ));
    }
    let mut files = RankFiles { source, doc: &doc, open: HashMap::new() };
    // `/` ends a folder's name on every system (and `\\` on Windows too).
    let sharded = out.is_dir() || out.as_os_str().to_string_lossy().chars().last().is_some_and(std::path::is_separator);
    let durable = options.durable;
    if !sharded {
        let format = options.format.unwrap_or(if out.extension().is_some_and(|e| e == "safetensors") {
            Format::Safetensors
        } else {
            Format::Deathtensors
        });
        let mut meta = Metadata::new();
        meta.insert("format".into(), "pt".into());
        if !doc.values.is_empty() {
            meta.insert("dcp.values".into(), Value::Object(doc.values.clone()).to_string());
        }
        let shard: Vec<&String> = doc.tensors.keys().collect();
        write_shard(out, &shard, &doc, &mut files, format, meta, durable)?;
        return Ok(vec![out.to_path_buf()]);
    }
    let mut groups: Vec<Vec<&String>> = Vec::new();
    let mut size = 0;
    for (fqn, t) in &doc.tensors {
        let n = t.byte_len();
        match groups.last_mut() {
            Some(g) if size + n <= options.max_shard_bytes || g.is_empty() => g.push(fqn),
            _ => {
                groups.push(vec![fqn]);
                size = 0;
            }
        }
        size += n;
    }
    let created = !out.exists();
    std::fs::create_dir_all(out).map_err(|e| Error::io(e, out, DOING))?;
    // Every shard and the index are staged, and renamed into place
    // together, the index last: a run that fails leaves none of them (and
    // no directory it made), and an older checkpoint there stays whole.
    let mut staged = StagedFiles::new(durable);
    let written = (|| {
        let mut written = Vec::new();
        let mut weight_map = Map::new();
        let mut total = 0;
        for (k, group) in groups.iter().enumerate() {
            let name = format!("model-{:05}-of-{:05}.safetensors", k + 1, groups.len());
            let mut meta = Metadata::new();
            meta.insert("format".into(), "pt".into());
            let target = out.join(&name);
            total += staged
                .write(&target, |at| write_shard(at, group, &doc, &mut files, Format::Safetensors, meta, durable))?;
            for fqn in group {
                weight_map.insert((*fqn).clone(), Value::String(name.clone()));
            }
            written.push(target);
        }
        let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let path = out.join("model.safetensors.index.json");
        let text = serde_json::to_string_pretty(&index).map_err(|e| Error::input(e.to_string(), &path, DOING))?;
        staged.write(&path, |at| {
            crate::fs::atomic::write_file(at, text.as_bytes(), durable).map_err(|e| Error::io(e, at, DOING))
        })?;
        written.push(path);
        Ok(written)
    })();
    match written {
        Ok(written) => staged.commit().map(|()| written),
        Err(e) => {
            drop(staged);
            if created {
                // Empty now: only what this run staged was in it.
                let _ = std::fs::remove_dir(out);
            }
            Err(e)
        }
    }
}

/// Whether the rank file `name`, open as `reader`, is the one a
/// checkpoint's metadata names: `size` bytes long, and written by rank
/// `rank` for the save id in its name (normally the save's; a rank may
/// name its files with an id of its own: docs/DISTRIBUTED.md). The one
/// check of a rank file, for `consolidate` and Python's `StorageReader`.
///
/// # Errors
/// What differs, in words.
pub fn check_rank_file(reader: &Reader, name: &str, rank: u64, size: u64) -> std::result::Result<(), String> {
    let actual = reader.file_len();
    if actual != size {
        return Err(format!("rank file is {actual} bytes, the checkpoint metadata says {size}"));
    }
    let meta = reader.header().metadata();
    let field = |k: &str| meta.and_then(|m| m.get(k)).map(String::as_str);
    let id = super::parse_rank_file_name(name).map_or("", |(_, id)| id);
    let (got_id, got_rank) = (field("dcp.save_id"), field("dcp.rank"));
    if got_id != Some(id) || got_rank != Some(&rank.to_string()) {
        return Err(format!(
            "rank file belongs to another checkpoint (save id {got_id:?}, rank {got_rank:?}; expected save id {id}, rank {rank})"
        ));
    }
    Ok(())
}

/// Assembles the tensors `names` and saves them to `path`; returns their
/// bytes.
fn write_shard(
    path: &Path,
    names: &[&String],
    doc: &Document,
    files: &mut RankFiles<'_>,
    format: Format,
    metadata: Metadata,
    durable: bool,
) -> Result<u64> {
    let mut data = Vec::with_capacity(names.len());
    for fqn in names {
        let t = &doc.tensors[*fqn];
        if !format.holds(t.dtype) {
            return Err(Error::input(
                format!("tensor {fqn:?} is complex128, which safetensors cannot hold; consolidate to a .dt file"),
                path,
                DOING,
            ));
        }
        data.push(assemble(fqn, t, files)?);
    }
    let specs = names
        .iter()
        .zip(&data)
        .map(|(fqn, bytes)| {
            let t = &doc.tensors[*fqn];
            (TensorSpec::new(fqn.as_str(), t.dtype, t.size.clone()), &bytes[..])
        })
        .collect();
    let options = WriteOptions {
        format,
        checksum: format == Format::Deathtensors,
        durable,
        metadata: Some(metadata),
        ..WriteOptions::default()
    };
    save(path, specs, &options)?;
    Ok(data.iter().map(|d| d.len() as u64).sum())
}

/// The 32 bytes of a SHA-256 written as 64 hex digits.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *o = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(out)
}
