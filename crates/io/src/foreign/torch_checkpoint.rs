//! `torch.save` checkpoints (`pytorch_model.bin`, `.pt`, `.pth`, `.ckpt`)
//! read without running them (docs/PICKLE.md): the zip container (or the
//! legacy format's pickles and raw storages) and the pickle parsed by
//! `deathtensors-format`, each storage's CRC checked (zip) before its bytes
//! are used, each tensor copied out of its storage with its own offset and
//! strides (contiguous ones borrowed from the mapping, not copied),
//! big-endian files swapped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use deathtensors_format::pickle::{scan, unpickle, Checkpoint, Scan, TensorRef, Unpickled, Value};
use deathtensors_format::zip::{is_zip, Zip, ZipMember};
use deathtensors_format::{Dtype, Header, Metadata, TensorSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::foreign::converted::Container;
use crate::fs::mmap::Mmap;
use crate::options::ReadOptions;
use crate::options::WriteOptions;

/// A stride-0 (expanded) view is materialised only up to this many times
/// its storage's bytes, or 64 MiB, whichever is more: a few bytes must not
/// claim terabytes of memory.
pub const MAX_VIEW_EXPANSION: u64 = 16;
const VIEW_FLOOR: u64 = 64 << 20;

const DOING: &str = "cannot read torch checkpoint";

/// The magic number a legacy (non-zip) checkpoint's first pickle holds
/// (`0x1950a86a20f9469cfc6c`, little-endian, as `LONG1` writes it).
const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
/// The only legacy protocol version torch writes.
const LEGACY_VERSION: i64 = 1001;

/// Where a storage's bytes are, by key: a zip member (found through its
/// local header when first read, so that opening reads only the
/// directory and the pickle), or a range of a legacy file.
type Storages = HashMap<Box<str>, Located>;

#[derive(Debug)]
enum Located {
    Member(ZipMember),
    Range(Range<u64>),
}

impl Located {
    fn len(&self) -> u64 {
        match self {
            Located::Member(m) => m.size,
            Located::Range(r) => r.end - r.start,
        }
    }
}

/// A `torch.save` checkpoint, open: its tensors listed (nothing of their
/// data read), each read on demand.
#[derive(Debug)]
pub struct TorchCheckpoint {
    path: PathBuf,
    map: Mmap,
    checkpoint: Checkpoint,
    big_endian: bool,
    storages: Storages,
}

/// One tensor of a [`TorchCheckpoint`].
#[derive(Clone, Copy, Debug)]
pub struct TorchTensor<'a> {
    /// Its name, flattened with dots.
    pub name: &'a str,
    /// Its element type.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: &'a [u64],
}

fn invalid(e: deathtensors_format::Error, path: &Path) -> Error {
    Error::format(e, path, DOING)
}

fn input(message: String, path: &Path) -> Error {
    Error::input(message, path, DOING)
}

/// A damaged or malformed checkpoint (an invalid file: exit 1,
/// `FormatError`).
fn damaged(message: String, path: &Path) -> Error {
    Error::checkpoint(message, path, DOING)
}

impl TorchCheckpoint {
    /// Opens the checkpoint at `path` (zip or legacy): its container and
    /// pickle read and checked (docs/PICKLE.md); no tensor's bytes are read.
    ///
    /// # Errors
    /// - `Io` if the file cannot be read.
    /// - `Format` (`InvalidZip`, `InvalidPickle`, ...) naming what is
    ///   refused: a name outside the allow list and its offset, a member
    ///   rule, a limit.
    /// - `InvalidCheckpoint` for a storage that is missing or of the wrong
    ///   size, and other damage; `InvalidInput` for a file of neither format.
    pub fn open(path: impl AsRef<Path>) -> Result<TorchCheckpoint> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(e, path, DOING))?;
        // SAFETY: as every mapped read (`Mmap::map`): a file changed under
        // the reader is the caller's to avoid (docs/PLATFORMS.md).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(e, path, DOING))?;
        // Only the directory, the pickle and the storages asked for are
        // read: no readahead of the rest.
        map.advise_random();
        let bytes = map.bytes();
        let (checkpoint, big_endian, storages) = if is_zip(bytes) {
            zip_checkpoint(bytes, path)?
        } else if legacy_magic_end(bytes).is_some() {
            legacy_checkpoint(bytes, path)?
        } else {
            return Err(damaged(
                "not a torch.save checkpoint (neither its zip format nor its legacy one)".into(),
                path,
            ));
        };
        // Every storage is there, of the size its persistent id says.
        for (_, st) in &checkpoint.storages {
            let located = storages.get(&st.key).ok_or_else(|| {
                damaged(format!("storage {:?} is not in the file (member data/{})", &*st.key, st.key), path)
            })?;
            let want = st.nbytes().unwrap_or(u64::MAX);
            let have = located.len();
            if have != want {
                return Err(damaged(
                    format!(
                        "storage {:?} is {have} bytes, its persistent id says {} elements ({want} bytes)",
                        &*st.key, st.numel
                    ),
                    path,
                ));
            }
        }
        Ok(TorchCheckpoint { path: path.to_path_buf(), map, checkpoint, big_endian, storages })
    }

    /// The tensors, in the pickle's order.
    pub fn tensors(&self) -> impl Iterator<Item = TorchTensor<'_>> {
        self.checkpoint.tensors.iter().map(|(n, t)| TorchTensor { name: n, dtype: t.dtype, shape: &t.shape })
    }

    /// The plain values (numbers, strings, ...) beside the tensors, as text,
    /// by flattened name.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.checkpoint.metadata
    }

    /// The other leaves (bytes, sets, ...): name and what they are.
    pub fn others(&self) -> &[(String, &'static str)] {
        &self.checkpoint.others
    }

    /// The pickle protocol the checkpoint declares.
    pub fn protocol(&self) -> u8 {
        self.checkpoint.protocol
    }

    /// The bytes of tensor `name`, contiguous and little-endian: borrowed
    /// from the file where they lie that way already, else copied out.
    /// In a zip, its storage's CRC-32 is checked first.
    ///
    /// # Errors
    /// `TensorNotFound`; `InvalidCheckpoint` for a CRC that does not
    /// match; `InvalidInput` for an expanded view past
    /// [`MAX_VIEW_EXPANSION`].
    pub fn read(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let (_, t) = self
            .checkpoint
            .tensors
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| Error::new(ErrorKind::TensorNotFound(name.into()), Some(&self.path), DOING))?;
        let (_, st) = self
            .checkpoint
            .storages
            .iter()
            .find(|(id, _)| *id == t.storage)
            .ok_or_else(|| input(format!("tensor {name:?} has no storage"), &self.path))?;
        let located = self
            .storages
            .get(&st.key)
            .ok_or_else(|| damaged(format!("storage {:?} is not in the file", &*st.key), &self.path))?;
        let bytes = self.map.bytes();
        let (range, crc) = match located {
            Located::Member(m) => (Zip::data(bytes, m).map_err(|e| invalid(e, &self.path))?, Some(m.crc32)),
            Located::Range(r) => (r.clone(), None),
        };
        let storage = slice(bytes, &range, &self.path)?;
        // Read ahead in large requests: the mapping is advised random.
        self.map.will_need(range.start as usize..range.end as usize);
        if crc.is_some_and(|crc| crc32fast::hash(storage) != crc) {
            return Err(damaged(
                format!("storage {:?} (tensor {name:?}) does not match its CRC-32: the file is damaged", &*st.key),
                &self.path,
            ));
        }
        let out = view(storage, t).map_err(|why| damaged(format!("tensor {name:?}: {why}"), &self.path))?;
        Ok(if self.big_endian {
            Cow::Owned(crate::foreign::converted::swapped(out.into_owned(), t.dtype))
        } else {
            out
        })
    }
}

/// The checkpoint of a torch.save zip: one archive folder holding one
/// `data.pkl`, `byteorder`, and a member `data/<key>` a storage.
fn zip_checkpoint(bytes: &[u8], path: &Path) -> Result<(Checkpoint, bool, Storages)> {
    let zip = Zip::parse(bytes).map_err(|e| invalid(e, path))?;
    let pickles: Vec<&ZipMember> =
        zip.members.iter().filter(|m| m.name.ends_with("/data.pkl") && m.name.matches('/').count() == 1).collect();
    let [pkl] = pickles[..] else {
        let names: Vec<&str> = pickles.iter().map(|m| m.name.as_str()).collect();
        let why = format!("{} data.pkl members at the top of the archive ({}), not one", names.len(), names.join(", "));
        return Err(damaged(why, path));
    };
    let archive = pkl.name.trim_end_matches("data.pkl").to_string();
    if let Some(m) = zip.members.iter().find(|m| !m.name.starts_with(&archive)) {
        return Err(damaged(format!("member {:?} lies outside the archive folder {archive:?}", m.name), path));
    }
    let checkpoint = Checkpoint::read(member_bytes(bytes, pkl, path)?).map_err(|e| invalid(e, path))?;
    let big_endian = match zip.get(&format!("{archive}byteorder")) {
        None => false,
        Some(m) => match member_bytes(bytes, m, path)? {
            b"little" => false,
            b"big" => true,
            other => {
                let shown = String::from_utf8_lossy(other);
                return Err(damaged(format!("byteorder is {shown:?}, not little or big"), path));
            }
        },
    };
    let prefix = format!("{archive}data/");
    let storages = zip
        .members
        .iter()
        .filter_map(|m| m.name.strip_prefix(&prefix).map(|key| (key.into(), Located::Member(m.clone()))))
        .collect();
    Ok((checkpoint, big_endian, storages))
}

/// Where a legacy checkpoint's first pickle (its magic number) ends.
fn legacy_magic_end(bytes: &[u8]) -> Option<usize> {
    let rest = match bytes.first() {
        Some(0x80) => bytes.get(2..)?,
        _ => bytes,
    };
    let rest = rest.strip_prefix(b"\x8a\x0a")?;
    (rest.get(..10)? == LEGACY_MAGIC && rest.get(10) == Some(&b'.')).then(|| bytes.len() - rest.len() + 11)
}

/// The checkpoint of a legacy (non-zip) torch.save file: pickles of its
/// magic number, protocol version and system info, the checkpoint itself,
/// the list of storage keys, then each storage as an 8-byte element count
/// and its bytes, in the list's order.
fn legacy_checkpoint(bytes: &[u8], path: &Path) -> Result<(Checkpoint, bool, Storages)> {
    let mut at = legacy_magic_end(bytes).unwrap_or(0);
    let next = |at: usize, what: &str| -> Result<Unpickled> {
        let rest = bytes.get(at..).unwrap_or(&[]);
        unpickle(rest, true).map_err(|e| damaged(format!("the legacy checkpoint's {what}: {e}"), path))
    };
    let version = next(at, "protocol version")?;
    if version.arena.int(version.root) != Some(LEGACY_VERSION) {
        return Err(damaged(format!("a legacy checkpoint of a protocol version other than {LEGACY_VERSION}"), path));
    }
    at += version.end;
    let info = next(at, "system info")?;
    let mut big_endian = false;
    if let Some(Value::Dict(items, _)) = info.arena.get(info.root) {
        for (k, v) in items {
            if info.arena.str(*k) == Some("little_endian") {
                big_endian = matches!(info.arena.get(*v), Some(Value::Bool(false)));
            }
        }
    }
    at += info.end;
    let (checkpoint, end) = Checkpoint::read_prefix(bytes.get(at..).unwrap_or(&[])).map_err(|e| invalid(e, path))?;
    at += end;
    let keys = next(at, "list of storage keys")?;
    at += keys.end;
    let key_ids = keys
        .arena
        .items(keys.root)
        .ok_or_else(|| damaged("the legacy checkpoint's storage keys are not a list".into(), path))?;
    let mut storages = Storages::new();
    for id in key_ids {
        let key: Box<str> =
            keys.arena.str(*id).ok_or_else(|| damaged("a legacy storage key is not a string".into(), path))?.into();
        let truncated = || damaged(format!("legacy storage {key:?} is truncated"), path);
        let st = checkpoint
            .storages
            .iter()
            .find(|(_, s)| s.key == key)
            .map(|(_, s)| s)
            .ok_or_else(|| damaged(format!("legacy storage {key:?} is not named by the checkpoint"), path))?;
        let count: [u8; 8] = bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).ok_or_else(truncated)?;
        let count = if big_endian { u64::from_be_bytes(count) } else { u64::from_le_bytes(count) };
        if count != st.numel {
            let why = format!("legacy storage {key:?} holds {count} elements, its persistent id says {}", st.numel);
            return Err(damaged(why, path));
        }
        let len = st.nbytes().ok_or_else(|| damaged(format!("legacy storage {key:?}'s size overflows"), path))?;
        let start = (at + 8) as u64;
        let end = start.checked_add(len).filter(|&e| e <= bytes.len() as u64).ok_or_else(truncated)?;
        if storages.insert(key.clone(), Located::Range(start..end)).is_some() {
            return Err(damaged(format!("legacy storage {key:?} is listed twice"), path));
        }
        at = end as usize;
    }
    Ok((checkpoint, big_endian, storages))
}

fn slice<'a>(bytes: &'a [u8], range: &Range<u64>, path: &Path) -> Result<&'a [u8]> {
    let r = usize::try_from(range.start).ok().zip(usize::try_from(range.end).ok());
    r.and_then(|(s, e)| bytes.get(s..e)).ok_or_else(|| damaged("a storage lies outside the file".into(), path))
}

fn member_bytes<'a>(bytes: &'a [u8], m: &ZipMember, path: &Path) -> Result<&'a [u8]> {
    slice(bytes, &Zip::data(bytes, m).map_err(|e| invalid(e, path))?, path)
}

/// The elements `t` addresses in `storage` (checked to lie inside it when
/// the pickle was read), contiguous.
fn view<'a>(storage: &'a [u8], t: &TensorRef) -> std::result::Result<Cow<'a, [u8]>, String> {
    let w = t.dtype.names().byte_width().ok_or("a packed dtype")? as usize;
    let numel: u64 = t.shape.iter().product();
    let nbytes = numel.checked_mul(w as u64).ok_or("its size overflows")?;
    if numel == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    // Contiguous strides: the bytes as they lie.
    let mut expect = 1u64;
    let contiguous = t.shape.iter().zip(&t.stride).rev().all(|(&n, &s)| {
        let ok = n == 1 || s == expect;
        expect = expect.saturating_mul(n);
        ok
    });
    let start = (t.offset as usize).checked_mul(w).ok_or("its offset overflows")?;
    if contiguous {
        let end = start.checked_add(nbytes as usize).ok_or("its extent overflows")?;
        return storage.get(start..end).map(Cow::Borrowed).ok_or_else(|| "it lies outside its storage".into());
    }
    let limit = (storage.len() as u64).saturating_mul(MAX_VIEW_EXPANSION).max(VIEW_FLOOR);
    if nbytes > limit {
        return Err(format!(
            "an expanded view of {nbytes} bytes over a storage of {}: past the limit of {MAX_VIEW_EXPANSION} times \
             its storage or 64 MiB",
            storage.len()
        ));
    }
    let mut out = Vec::with_capacity(nbytes as usize);
    let rank = t.shape.len();
    let mut index = vec![0u64; rank];
    loop {
        let at: u64 = index.iter().zip(&t.stride).map(|(i, s)| i * s).sum::<u64>() + t.offset;
        let b = (at as usize) * w;
        out.extend_from_slice(storage.get(b..b + w).ok_or("it lies outside its storage")?);
        // The next index, last dimension fastest.
        let mut d = rank;
        loop {
            if d == 0 {
                return Ok(Cow::Owned(out));
            }
            d -= 1;
            index[d] += 1;
            if index[d] < t.shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Whether the local file at `path` looks like a torch pickle checkpoint
/// from its first 16 bytes: a zip, the legacy format's magic number, or a
/// pickle of protocol 2 to 5, and in no case a shape our own formats can
/// take. A safetensors or bintensors file starts with its header's length:
/// `80 02 00 ..` is a 640-byte header, so a pickle's PROTO must be followed
/// by an opcode (never 0), and a safetensors header's `{` at byte 8 rules
/// a pickle and a zip out. A zip named `.npz` is numpy's
/// ([`crate::is_numpy_file`]). `false` for anything unreadable.
pub fn is_torch_checkpoint(path: impl AsRef<Path>) -> bool {
    use std::io::Read;
    let path = path.as_ref();
    let mut head = [0u8; 16];
    let Ok(n) = File::open(path).and_then(|f| f.take(16).read(&mut head)) else {
        return false;
    };
    let head = &head[..n];
    if head.len() < 16 || head[8] == b'{' || head.starts_with(&deathtensors_format::MAGIC) {
        return false;
    }
    // The opcodes a pickle's first instruction after PROTO can be that
    // torch writes or a plain pickle of a container starts with.
    const FIRST: &[u8] = b"}](c)XKMJNG\x95\x8a\x8c\x93\x88\x89\x80";
    (is_zip(head) && !crate::is_numpy_file(path))
        || legacy_magic_end(head).is_some()
        || (head[0] == 0x80 && (2..=5).contains(&head[1]) && FIRST.contains(&head[2]))
}

/// What the pickle of the checkpoint at `path` refers to and would call
/// (docs/PICKLE.md, "Scanning"): the `data.pkl` of a zip checkpoint, or
/// the file itself as a bare pickle. Nothing is executed.
///
/// # Errors
/// `Io`; `Format` for a container or pickle that cannot be read at all.
pub fn scan_pickle(path: impl AsRef<Path>) -> Result<Scan> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| Error::io(e, path, "cannot open"))?;
    // SAFETY: as `TorchCheckpoint::open`.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(e, path, "cannot open"))?;
    let bytes = map.bytes();
    let data = if is_zip(bytes) {
        let zip = Zip::parse(bytes).map_err(|e| Error::format(e, path, "cannot scan"))?;
        let pkl = zip.members.iter().filter(|m| m.name.ends_with("data.pkl")).collect::<Vec<_>>();
        let [pkl] = pkl[..] else {
            return Err(Error::input(format!("{} data.pkl members, not one", pkl.len()), path, "cannot scan"));
        };
        member_bytes(bytes, pkl, path)?
    } else {
        bytes
    };
    scan(data).map_err(|e| Error::format(e, path, "cannot scan"))
}

/// Tied weights: names whose tensors are the same view of one storage
/// (same dtype, offset, shape and strides), each group in name order. The
/// first of each group is kept, the others map to it (what safetensors'
/// own conversion script, `convert.py`, does with `_remove_duplicate_names`).
impl TorchCheckpoint {
    /// `(removed, kept)` for every name tied to an earlier one in name
    /// order.
    pub fn tied(&self) -> Vec<(String, String)> {
        let mut names: Vec<&(String, TensorRef)> = self.checkpoint.tensors.iter().collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Vec::new();
        let mut kept: Vec<&(String, TensorRef)> = Vec::new();
        for t in names {
            match kept.iter().find(|k| k.1 == t.1) {
                Some(k) => out.push((t.0.clone(), k.0.clone())),
                None => kept.push(t),
            }
        }
        out
    }
}

/// Converts the torch checkpoint `input` to `output` as `options` say
/// (safetensors or deathtensors): its tensors, and its plain values as the
/// file's metadata. Tied weights ([`TorchCheckpoint::tied`]) are written
/// once, under the first name, each other name recorded in the metadata
/// as `removed: kept` (as safetensors' `convert.py` writes them); views
/// that share a storage without being the same each keep their own
/// values. A state dict of plain tensors converts to the bytes
/// `safetensors.torch.save_file` writes for `torch.load`'s result. Leaves
/// that are neither tensors nor plain values (bytes, sets, ...) are
/// refused naming them, unless `skip_others`.
///
/// # Errors
/// As [`TorchCheckpoint::open`] and [`TorchCheckpoint::read`], and the
/// writer's; `InvalidInput` naming the first other leaf, or a plain value
/// whose name a tied weight's record would take.
pub fn convert_torch_checkpoint(
    input: &Path,
    output: &Path,
    options: &WriteOptions,
    skip_others: bool,
) -> Result<Header> {
    let c = TorchCheckpoint::open(input)?;
    if let (Some((name, what)), false) = (c.others().first(), skip_others) {
        return Err(Error::input(
            format!("{name} is {what}, neither a tensor nor a plain value (skip such leaves to convert the rest)"),
            input,
            DOING,
        ));
    }
    crate::foreign::converted::convert(&c, input, output, options)
}

/// The checkpoint as the safetensors file it converts to
/// (`converted.rs`): tied weights ([`TorchCheckpoint::tied`]) once,
/// under the first name, each other name recorded in the metadata as
/// `removed: kept`, beside the plain values.
impl Container for TorchCheckpoint {
    fn specs(&self) -> Vec<TensorSpec> {
        let tied = self.tied();
        self.tensors()
            .filter(|t| !tied.iter().any(|(removed, _)| removed == t.name))
            .map(|t| TensorSpec::new(t.name, t.dtype, t.shape.to_vec()))
            .collect()
    }

    fn conversion_metadata(&self) -> Result<Metadata> {
        let mut meta = Metadata::new();
        for (k, v) in self.metadata().iter().chain(&self.tied()) {
            if meta.insert(k.clone(), v.clone()).is_some() {
                return Err(Error::input(format!("{k:?} is both a value and a tied weight's name"), &self.path, DOING));
            }
        }
        Ok(meta)
    }

    fn tensor(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        self.read(name)
    }

    fn doing(&self) -> &'static str {
        DOING
    }
}

/// Opens the torch checkpoint at `path` as a [`Reader`](crate::Reader) of
/// the safetensors file it converts to: its tensors listed from the
/// pickle, each read from its storage only when asked for.
///
/// # Errors
/// As [`TorchCheckpoint::open`] and [`crate::open_converted`].
pub fn open_torch_checkpoint(path: impl AsRef<Path>, options: ReadOptions) -> Result<crate::Reader> {
    let path = path.as_ref();
    crate::foreign::converted::open_converted(TorchCheckpoint::open(path)?, path, options)
}

/// `(tensor, shard)` pairs of an index's weight map.
type WeightMap = Vec<(String, String)>;

/// The weight map of a JSON index (`{"weight_map": {tensor: shard}}`) whose
/// shards are torch pickle checkpoints (transformers'
/// `pytorch_model.bin.index.json`), if `path` is one: `None` for any other
/// file, and for an index of other shards.
fn torch_index(path: &Path) -> Option<(serde_json::Map<String, serde_json::Value>, WeightMap)> {
    use std::io::Read;
    if !crate::tools::sharded::is_json_index(path) {
        return None;
    }
    let mut text = Vec::new();
    File::open(path).ok()?.take(crate::tools::sharded::MAX_INDEX_LEN + 1).read_to_end(&mut text).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let map = value.get("weight_map")?.as_object()?;
    let pairs: Vec<(String, String)> =
        map.iter().filter_map(|(t, s)| Some((t.clone(), s.as_str()?.to_string()))).collect();
    let dir = path.parent().unwrap_or(Path::new("."));
    let (_, first) = pairs.first()?;
    if !is_torch_checkpoint(dir.join(first)) {
        return None;
    }
    let meta = value.get("metadata").and_then(|m| m.as_object()).cloned().unwrap_or_default();
    Some((meta, pairs))
}

/// Whether `path` is a JSON index of torch pickle checkpoints
/// (transformers' `pytorch_model.bin.index.json`).
pub fn is_torch_index(path: impl AsRef<Path>) -> bool {
    torch_index(path.as_ref()).is_some()
}

/// The name a converted shard takes: transformers' (`pytorch_model-00001-
/// of-00002.bin` becomes `model-00001-of-00002.safetensors`).
fn converted_shard_name(shard: &str, ext: &str) -> String {
    let stem = Path::new(shard).file_stem().and_then(|s| s.to_str()).unwrap_or(shard);
    let stem = stem.strip_prefix("pytorch_").unwrap_or(stem);
    format!("{stem}.{ext}")
}

/// Converts a sharded torch checkpoint, by its index `index` (transformers'
/// `pytorch_model.bin.index.json`), to shards of `options.format` beside
/// `out_index` (named as transformers names them) and that index, written
/// last. Each shard converts as [`convert_torch_checkpoint`] converts a
/// file; every tensor the index names must be in its shard, and no shard
/// may hold a tensor the index does not name. Returns the shards written.
///
/// # Errors
/// As [`convert_torch_checkpoint`]; `InvalidInput` for an index that is
/// not one of torch checkpoints, or that disagrees with its shards.
pub fn convert_torch_index(
    index: &Path,
    out_index: &Path,
    options: &WriteOptions,
    skip_others: bool,
) -> Result<Vec<PathBuf>> {
    const DOING_INDEX: &str = "cannot convert sharded torch checkpoint";
    let (meta, pairs) = torch_index(index).ok_or_else(|| {
        Error::input("not an index of torch checkpoints (a weight_map of .bin shards)", index, DOING_INDEX)
    })?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let out_dir = out_index.parent().unwrap_or(Path::new("."));
    let ext = if options.format == deathtensors_format::Format::Deathtensors { "dt" } else { "safetensors" };
    let mut shards: Vec<&str> = pairs.iter().map(|(_, s)| s.as_str()).collect();
    shards.sort_unstable();
    shards.dedup();
    let mut weight_map = Vec::new();
    let mut written = Vec::new();
    let mut total = 0u64;
    for shard in shards {
        crate::tools::sharded::check_shard_name(index, shard)?;
        let input = dir.join(shard);
        let c = TorchCheckpoint::open(&input)?;
        let listed: Vec<&str> = pairs.iter().filter(|(_, s)| s == shard).map(|(t, _)| t.as_str()).collect();
        let held: Vec<&str> = c.tensors().map(|t| t.name).collect();
        if let Some(t) = listed.iter().find(|t| !held.contains(t)) {
            return Err(Error::input(
                format!("the index puts {t:?} in {shard}, which does not hold it"),
                index,
                DOING_INDEX,
            ));
        }
        if let Some(t) = held.iter().find(|t| !listed.contains(t)) {
            return Err(Error::input(
                format!("{shard} holds {t:?}, which the index does not name"),
                index,
                DOING_INDEX,
            ));
        }
        let name = converted_shard_name(shard, ext);
        let out = out_dir.join(&name);
        let header = convert_torch_checkpoint(&input, &out, options, skip_others)?;
        for t in header.tensors() {
            total += t.byte_len();
            weight_map.push((t.name.to_string(), name.clone()));
        }
        written.push(out);
    }
    let metadata: deathtensors_format::Metadata = meta
        .into_iter()
        .filter(|(k, _)| k != "total_size")
        .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect();
    crate::tools::sharded::write_index(out_index, &weight_map, total, Some(&metadata), options.durable)?;
    Ok(written)
}
