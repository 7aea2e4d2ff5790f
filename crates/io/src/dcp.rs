//! Consolidation of distributed checkpoints (`deathtensors.distributed`'s
//! `StorageWriter`, `docs/DISTRIBUTED.md`): the JSON metadata
//! (`deathtensors.json`) read and checked, each tensor's chunks read tile
//! by tile from the rank files (each tile checked against its digest) and
//! put together, then written as one file or as a Hugging Face sharded
//! checkpoint. The command line's `consolidate` and Python's
//! `deathtensors.distributed.consolidate` both run this code, on a local
//! directory or (through `deathtensors-remote`) an object store's prefix:
//! the files are read through a [`CheckpointSource`] (`source.rs`).

mod source;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use deathtensors_format::{Dtype, Format, Metadata, TensorSpec};
use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::options::WriteOptions;
use crate::reader::Reader;
use crate::writer::save;

pub use source::{CheckpointDir, CheckpointSource, DCP_METADATA};

/// The largest metadata document read (as `deathtensors.distributed`).
const MAX_METADATA_BYTES: u64 = 512 << 20;
/// Tensors of more dimensions are refused.
const MAX_RANK: usize = 64;
/// Chunks of more tiles are refused (as `deathtensors.distributed`): a
/// hostile `rows` of 1 on a huge chunk is refused before its tiles are
/// listed.
const MAX_TILES: u64 = 1 << 20;
/// Hugging Face's default largest shard.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 5 << 30;
const DOING: &str = "cannot consolidate";

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

/// One saved chunk of a tensor: where its tiles are.
#[derive(Debug)]
struct Chunk {
    offsets: Vec<u64>,
    sizes: Vec<u64>,
    file: String,
    /// Rows a tile, along the first dimension.
    rows: u64,
    /// Columns a tile, along the second (`None`: all of them).
    cols: Option<u64>,
    sha256: Option<Vec<String>>,
}

/// A tile of a chunk: rows `r0..r1` and columns (indices of the second
/// dimension) `c0..c1` within it; columns `0..0` for fewer than two
/// dimensions.
#[derive(Clone, Copy, Debug)]
struct Tile {
    r0: u64,
    r1: u64,
    c0: u64,
    c1: u64,
}

impl Chunk {
    /// How many tiles the chunk has, without listing them.
    fn tile_count(&self) -> Option<u64> {
        let (Some(&n), false) = (self.sizes.first(), self.sizes.contains(&0)) else { return Some(1) };
        let across = match (self.cols, self.sizes.get(1)) {
            (Some(c), Some(&w)) => w.div_ceil(c),
            _ => 1,
        };
        n.div_ceil(self.rows).checked_mul(across)
    }

    /// The chunk's tiles in row-major order (the order of `sha256`); one
    /// for a scalar or an empty chunk. The count is bounded at parse time.
    fn tiles(&self) -> Vec<Tile> {
        let width = self.sizes.get(1).copied().unwrap_or(0);
        let Some(&n) = self.sizes.first().filter(|_| !self.sizes.contains(&0)) else {
            return vec![Tile { r0: 0, r1: self.sizes.first().copied().unwrap_or(0), c0: 0, c1: width }];
        };
        let step = self.cols.filter(|_| width > 0).unwrap_or(width.max(1));
        let mut out = Vec::new();
        for r0 in (0..n).step_by(self.rows as usize) {
            let r1 = r0.saturating_add(self.rows).min(n);
            if width == 0 {
                out.push(Tile { r0, r1, c0: 0, c1: 0 });
            }
            for c0 in (0..width).step_by(step as usize) {
                out.push(Tile { r0, r1, c0, c1: c0.saturating_add(step).min(width) });
            }
        }
        out
    }

    /// The shape of a tile's tensor, and its offsets in the chunk.
    fn tile_box(&self, t: Tile) -> (Vec<u64>, Vec<u64>) {
        let mut shape = self.sizes.clone();
        let mut at = vec![0; self.sizes.len()];
        if let Some(first) = shape.first_mut() {
            *first = t.r1 - t.r0;
            at[0] = t.r0;
        }
        if shape.len() > 1 {
            shape[1] = t.c1 - t.c0;
            at[1] = t.c0;
        }
        (shape, at)
    }
}

/// A tensor of the checkpoint.
#[derive(Debug)]
struct Tensor {
    dtype: Dtype,
    size: Vec<u64>,
    chunks: Vec<Chunk>,
}

impl Tensor {
    /// The full tensor's bytes: checked at parse time to fit in a `u64`.
    fn byte_len(&self) -> u64 {
        elements(&self.size).and_then(|n| n.checked_mul(self.dtype.bits() / 8)).unwrap_or(u64::MAX)
    }
}

/// The number of elements of a box of `dims`, if it fits in a `u64`.
fn elements(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, d| acc.checked_mul(*d))
}

/// The metadata document, checked.
#[derive(Debug)]
struct Document {
    save_id: String,
    files: HashMap<String, (u64, u64)>,
    tensors: BTreeMap<String, Tensor>,
    values: Map<String, Value>,
}

/// torch's dtype names (as the metadata stores them) to ours.
fn dtype(name: &str) -> Option<Dtype> {
    Some(match name {
        "float32" => Dtype::F32,
        "float64" => Dtype::F64,
        "float16" => Dtype::F16,
        "bfloat16" => Dtype::BF16,
        "int8" => Dtype::I8,
        "int16" => Dtype::I16,
        "int32" => Dtype::I32,
        "int64" => Dtype::I64,
        "uint8" => Dtype::U8,
        "uint16" => Dtype::U16,
        "uint32" => Dtype::U32,
        "uint64" => Dtype::U64,
        "bool" => Dtype::BOOL,
        "complex64" => Dtype::C64,
        "complex128" => Dtype::C128,
        "float8_e4m3fn" => Dtype::F8_E4M3,
        "float8_e5m2" => Dtype::F8_E5M2,
        _ => return None,
    })
}

fn nat(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn dims(v: &Value) -> Option<Vec<u64>> {
    let list = v.as_array().filter(|l| l.len() <= MAX_RANK)?;
    list.iter().map(nat).collect()
}

fn is_rank_file(name: &str, save_id: &str) -> Option<u64> {
    let rest = name.strip_prefix("rank-")?;
    let (rank, rest) = rest.split_once('-')?;
    let (id, ext) = rest.split_once('.')?;
    let ok = (5..=9).contains(&rank.len())
        && rank.bytes().all(|b| b.is_ascii_digit())
        && id == save_id
        && matches!(ext, "dt" | "safetensors");
    ok.then(|| rank.parse().ok()).flatten()
}

/// Parses and checks the document `data` read from `path`.
fn parse(data: &[u8], path: &Path) -> Result<Document> {
    let bad = |why: String| Error::checkpoint(format!("invalid checkpoint metadata: {why}"), path, DOING);
    if data.len() >= 2 && data[0] == 0x80 && (2..=5).contains(&data[1]) {
        return Err(bad("this is a pickle, not JSON; deathtensors never unpickles metadata".into()));
    }
    let doc: Value = serde_json::from_slice(data).map_err(|e| bad(format!("not a JSON document ({e})")))?;
    let doc = doc.as_object().ok_or_else(|| bad("not a JSON object".into()))?;
    if doc.get("deathtensors_dcp").and_then(Value::as_u64) != Some(1) {
        return Err(bad(format!(
            "version {}, this reader knows 1",
            doc.get("deathtensors_dcp").unwrap_or(&Value::Null)
        )));
    }
    let save_id = doc.get("save_id").and_then(Value::as_str).unwrap_or("");
    if save_id.len() != 16 || !save_id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(bad("save_id must be 16 lowercase hex digits".into()));
    }
    let fmt = doc.get("format").and_then(Value::as_str);
    let ext = match fmt {
        Some("deathtensors") => "dt",
        Some("safetensors") => "safetensors",
        _ => return Err(bad(format!("format {}", doc.get("format").unwrap_or(&Value::Null)))),
    };
    let mut files = HashMap::new();
    for (name, f) in doc.get("files").and_then(Value::as_object).ok_or_else(|| bad("files must be an object".into()))? {
        let rank = is_rank_file(name, save_id)
            .filter(|_| name.ends_with(&format!(".{ext}")))
            .ok_or_else(|| bad(format!("file {name:?} is not a rank file of save {save_id}")))?;
        let (r, size) = (f.get("rank").and_then(nat), f.get("size").and_then(nat));
        match (r, size) {
            (Some(r), Some(size)) if r == rank => files.insert(name.clone(), (rank, size)),
            _ => return Err(bad(format!("file {name:?}: needs rank (as in its name) and size"))),
        };
    }
    let mut tensors = BTreeMap::new();
    for (fqn, t) in
        doc.get("tensors").and_then(Value::as_object).ok_or_else(|| bad("tensors must be an object".into()))?
    {
        let what = format!("tensor {fqn:?}");
        let dt = t.get("dtype").and_then(Value::as_str).and_then(dtype);
        let size = t.get("size").and_then(dims);
        let (Some(dt), Some(size), Some(chunk_list)) = (dt, size, t.get("chunks").and_then(Value::as_array)) else {
            return Err(bad(format!("{what}: needs a known dtype, a size and chunks")));
        };
        let mut chunks = Vec::new();
        for c in chunk_list {
            let offsets = c.get("offsets").and_then(dims);
            let sizes = c.get("sizes").and_then(dims);
            let file = c.get("file").and_then(Value::as_str);
            let rows = c.get("rows").and_then(nat).filter(|r| *r > 0);
            let (Some(offsets), Some(sizes), Some(file), Some(rows)) = (offsets, sizes, file, rows) else {
                return Err(bad(format!("{what}: a chunk needs offsets, sizes, file and positive rows")));
            };
            if offsets.len() != size.len() || sizes.len() != size.len() {
                return Err(bad(format!("{what}: a chunk's offsets and sizes must have {} dimensions", size.len())));
            }
            if offsets.iter().zip(&sizes).zip(&size).any(|((o, s), d)| o.checked_add(*s).is_none_or(|e| e > *d)) {
                return Err(bad(format!("{what}: chunk at {offsets:?} lies outside the tensor's size {size:?}")));
            }
            if !files.contains_key(file) {
                return Err(bad(format!(
                    "{what}: chunk at {offsets:?} names file {file:?}, which files does not list"
                )));
            }
            let cols = match c.get("cols") {
                None => None,
                Some(v) => match nat(v).filter(|c| *c > 0) {
                    Some(c) if sizes.len() >= 2 => Some(c),
                    _ => {
                        return Err(bad(format!(
                            "{what}: chunk at {offsets:?}: cols must be a positive integer, on a chunk of 2 or more dimensions"
                        )))
                    }
                },
            };
            let mut chunk = Chunk { offsets, sizes, file: file.to_string(), rows, cols, sha256: None };
            let tiles = chunk.tile_count().filter(|n| *n <= MAX_TILES).ok_or_else(|| {
                bad(format!("{what}: chunk at {:?}: more than the {MAX_TILES} tiles allowed", chunk.offsets))
            })?;
            let offsets = &chunk.offsets;
            let sha256 = match (ext, c.get("sha256")) {
                ("safetensors", Some(Value::Array(list)))
                    if list.len() as u64 == tiles
                        && list.iter().all(|h| {
                            h.as_str().is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
                        }) =>
                {
                    Some(list.iter().map(|h| h.as_str().unwrap_or_default().to_ascii_lowercase()).collect())
                }
                ("dt", None) => None,
                _ => {
                    return Err(bad(format!(
                    "{what}: chunk at {offsets:?}: sha256 must list a digest per tile of safetensors rank files only"
                )))
                }
            };
            chunk.sha256 = sha256;
            chunks.push(chunk);
        }
        let tensor = Tensor { dtype: dt, size, chunks };
        check_cover(&tensor).map_err(|why| bad(format!("{what}: {why}")))?;
        tensors.insert(fqn.clone(), tensor);
    }
    let values =
        doc.get("values").and_then(Value::as_object).cloned().ok_or_else(|| bad("values must be an object".into()))?;
    Ok(Document { save_id: save_id.to_string(), files, tensors, values })
}

/// Chunks must add up to the tensor without overlapping.
fn check_cover(t: &Tensor) -> std::result::Result<(), String> {
    let total = elements(&t.size)
        .filter(|n| n.checked_mul(t.dtype.bits() / 8).is_some())
        .ok_or_else(|| format!("its size {:?} is too large", t.size))?;
    let sum = t.chunks.iter().try_fold(0u64, |acc, c| acc.checked_add(elements(&c.sizes)?));
    if sum != Some(total) {
        return Err(format!("its chunks do not add up to its {total} elements"));
    }
    for (i, a) in t.chunks.iter().enumerate() {
        for b in &t.chunks[..i] {
            let empty = a.sizes.contains(&0) || b.sizes.contains(&0);
            let overlap = (0..a.offsets.len())
                .all(|d| a.offsets[d] < b.offsets[d] + b.sizes[d] && b.offsets[d] < a.offsets[d] + a.sizes[d]);
            if !empty && overlap {
                return Err(format!("chunks at {:?} and {:?} overlap", a.offsets, b.offsets));
            }
        }
    }
    Ok(())
}

/// The tensor name of tile `t` of `c`: the tensor's name and the tile's
/// global offsets.
fn block_name(fqn: &str, c: &Chunk, t: Tile) -> String {
    let (_, at) = c.tile_box(t);
    let offsets: Vec<String> = c.offsets.iter().zip(&at).map(|(o, a)| (o + a).to_string()).collect();
    format!("{fqn}@{}", offsets.join(","))
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
            let actual = reader.file_len();
            if actual != size {
                return Err(Error::checkpoint(
                    format!("rank file is {actual} bytes, the checkpoint metadata says {size}"),
                    &path,
                    DOING,
                ));
            }
            let meta = reader.header().metadata();
            let field = |k: &str| meta.and_then(|m| m.get(k)).map(String::as_str);
            if field("dcp.save_id") != Some(&self.doc.save_id) || field("dcp.rank") != Some(&rank.to_string()) {
                return Err(Error::checkpoint(
                    format!(
                        "rank file belongs to another checkpoint (expected save id {}, rank {rank})",
                        self.doc.save_id
                    ),
                    &path,
                    DOING,
                ));
            }
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
            let name = block_name(fqn, c, tile);
            let bytes = match &c.sha256 {
                None => reader.read_verified(&name)?,
                Some(digests) => {
                    let bytes = reader.read(&name)?;
                    let actual = crate::hash::sha256(&bytes);
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
        let ranks = source.names()?.iter().any(|n| n.starts_with("rank-"));
        return Err(if ranks {
            let why = format!("incomplete checkpoint: rank files but no {DCP_METADATA} (a save that did not commit)");
            Error::checkpoint(why, dir, DOING)
        } else {
            Error::input(format!("no checkpoint: {DCP_METADATA} is missing"), dir, DOING)
        });
    };
    parse(&data, &source.name_of(DCP_METADATA))
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
    std::fs::create_dir_all(out).map_err(|e| Error::io(e, out, DOING))?;
    let mut written = Vec::new();
    let mut weight_map = Map::new();
    let mut total = 0;
    for (k, group) in groups.iter().enumerate() {
        let name = format!("model-{:05}-of-{:05}.safetensors", k + 1, groups.len());
        let mut meta = Metadata::new();
        meta.insert("format".into(), "pt".into());
        total += write_shard(&out.join(&name), group, &doc, &mut files, Format::Safetensors, meta, durable)?;
        for fqn in group {
            weight_map.insert((*fqn).clone(), Value::String(name.clone()));
        }
        written.push(out.join(&name));
    }
    let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
    let path = out.join("model.safetensors.index.json");
    let text = serde_json::to_string_pretty(&index).map_err(|e| Error::input(e.to_string(), &path, DOING))?;
    crate::atomic::write_file(&path, text.as_bytes(), durable).map_err(|e| Error::io(e, &path, DOING))?;
    written.push(path);
    Ok(written)
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
        if format == Format::Safetensors && t.dtype == Dtype::C128 {
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
