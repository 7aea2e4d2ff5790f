//! `torch.save` checkpoints (`pytorch_model.bin`, `.pt`, `.pth`, `.ckpt`)
//! read without running them (docs/PICKLE.md): the zip container and its
//! pickle parsed by `deathtensors-format`, each storage's CRC checked
//! before its bytes are used, each tensor copied out of its storage with
//! its own offset and strides (contiguous ones borrowed from the mapping,
//! not copied), big-endian files swapped.

use std::borrow::Cow;
use std::fs::File;
use std::path::{Path, PathBuf};

use deathtensors_format::pickle::{scan, Checkpoint, Scan, StorageRef, TensorRef};
use deathtensors_format::zip::{is_zip, Zip, ZipMember};
use deathtensors_format::{Dtype, Header, TensorSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::mmap::Mmap;
use crate::options::WriteOptions;
use crate::writer::save;

/// A stride-0 (expanded) view is materialised only up to this many times
/// its storage's bytes, or 64 MiB, whichever is more: a few bytes must not
/// claim terabytes of memory.
pub const MAX_VIEW_EXPANSION: u64 = 16;
const VIEW_FLOOR: u64 = 64 << 20;

const DOING: &str = "cannot read torch checkpoint";

/// A `torch.save` zip checkpoint, open: its tensors listed (nothing of
/// their data read), each read on demand.
#[derive(Debug)]
pub struct TorchCheckpoint {
    path: PathBuf,
    map: Mmap,
    zip: Zip,
    archive: String,
    checkpoint: Checkpoint,
    big_endian: bool,
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
    /// Opens the zip checkpoint at `path`: its directory and pickle read
    /// and checked (docs/PICKLE.md); no tensor's bytes are read.
    ///
    /// # Errors
    /// - `Io` if the file cannot be read.
    /// - `Format` (`InvalidZip`, `InvalidPickle`, ...) naming what is
    ///   refused: a name outside the allow list and its offset, a member
    ///   rule, a limit.
    /// - `InvalidInput` for a legacy (non-zip) checkpoint, or a storage
    ///   member that is missing or of the wrong size.
    pub fn open(path: impl AsRef<Path>) -> Result<TorchCheckpoint> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(e, path, DOING))?;
        // SAFETY: as every mapped read (`Mmap::map`): a file changed under
        // the reader is the caller's to avoid (docs/PLATFORMS.md).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(e, path, DOING))?;
        let bytes = map.bytes();
        if !is_zip(bytes) {
            let why = if bytes.first() == Some(&0x80) {
                "a legacy (non-zip) torch checkpoint, which this version does not read yet: resave it with torch.save's default format"
            } else {
                "not a torch.save zip checkpoint"
            };
            return Err(input(why.into(), path));
        }
        let zip = Zip::parse(bytes).map_err(|e| invalid(e, path))?;
        // One archive folder holds everything, and one data.pkl.
        let pickles: Vec<&ZipMember> =
            zip.members.iter().filter(|m| m.name.ends_with("/data.pkl") && m.name.matches('/').count() == 1).collect();
        let [pkl] = pickles[..] else {
            return Err(damaged(
                format!("{} data.pkl members at the top of the archive, not one", pickles.len()),
                path,
            ));
        };
        let archive = pkl.name.trim_end_matches("data.pkl").to_string();
        if let Some(m) = zip.members.iter().find(|m| !m.name.starts_with(&archive)) {
            return Err(damaged(format!("member {:?} lies outside the archive folder {archive:?}", m.name), path));
        }
        let data = member_bytes(bytes, pkl, path)?;
        let checkpoint = Checkpoint::read(data).map_err(|e| invalid(e, path))?;
        let big_endian = match zip.get(&format!("{archive}byteorder")) {
            None => false,
            Some(m) => match member_bytes(bytes, m, path)? {
                b"little" => false,
                b"big" => true,
                other => {
                    return Err(damaged(
                        format!("byteorder is {:?}, not little or big", String::from_utf8_lossy(other)),
                        path,
                    ))
                }
            },
        };
        let c = TorchCheckpoint { path: path.to_path_buf(), map, zip, archive, checkpoint, big_endian };
        // Every storage is a member of the size its id says.
        for (_, st) in &c.checkpoint.storages {
            let m = c.storage_member(st)?;
            let want = st.nbytes().unwrap_or(u64::MAX);
            let have = m.data.end - m.data.start;
            if have != want {
                return Err(damaged(
                    format!("storage {:?} is {have} bytes, its persistent id says {want}", &*st.key),
                    path,
                ));
            }
        }
        Ok(c)
    }

    fn storage_member(&self, st: &StorageRef) -> Result<&ZipMember> {
        let name = format!("{}data/{}", self.archive, st.key);
        self.zip.get(&name).ok_or_else(|| damaged(format!("storage {:?} has no member {name:?}", &*st.key), &self.path))
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
    /// Its storage's CRC-32 is checked first.
    ///
    /// # Errors
    /// `TensorNotFound`; `Format` for a CRC that does not match; `InvalidInput`
    /// for an expanded view past [`MAX_VIEW_EXPANSION`].
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
        let m = self.storage_member(st)?;
        let storage = member_bytes(self.map.bytes(), m, &self.path)?;
        if crc32fast::hash(storage) != m.crc32 {
            return Err(damaged(
                format!("storage {:?} (tensor {name:?}) does not match its CRC-32: the file is damaged", &*st.key),
                &self.path,
            ));
        }
        let out = view(storage, t).map_err(|why| input(format!("tensor {name:?}: {why}"), &self.path))?;
        Ok(if self.big_endian { Cow::Owned(swapped(out.into_owned(), t.dtype)) } else { out })
    }
}

fn member_bytes<'a>(bytes: &'a [u8], m: &ZipMember, path: &Path) -> Result<&'a [u8]> {
    let (s, e) = (usize::try_from(m.data.start), usize::try_from(m.data.end));
    match (s, e) {
        (Ok(s), Ok(e)) => {
            bytes.get(s..e).ok_or_else(|| damaged(format!("member {:?} lies outside the file", m.name), path))
        }
        _ => Err(damaged(format!("member {:?} lies outside the file", m.name), path)),
    }
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
            "a view of {nbytes} bytes over a storage of {}: more than {MAX_VIEW_EXPANSION} times it (an expanded view is refused past that)",
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

/// Big-endian elements swapped to little-endian (complex numbers part by
/// part).
fn swapped(mut bytes: Vec<u8>, dtype: Dtype) -> Vec<u8> {
    let w = dtype.names().byte_width().unwrap_or(1) as usize;
    let part = if matches!(dtype, Dtype::C64 | Dtype::C128) { w / 2 } else { w };
    if part > 1 {
        for chunk in bytes.chunks_exact_mut(part) {
            chunk.reverse();
        }
    }
    bytes
}

/// Whether the local file at `path` looks like a torch pickle checkpoint
/// (a zip, or a pickle of protocol 2 to 5): its first bytes only. `false`
/// for anything unreadable, and for our own formats.
pub fn is_torch_checkpoint(path: impl AsRef<Path>) -> bool {
    use std::io::Read;
    let mut head = [0u8; 4];
    let read = File::open(path).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && (is_zip(&head) || (head[0] == 0x80 && (2..=5).contains(&head[1])))
}

/// What the pickle of the checkpoint at `path` refers to and would call
/// (docs/PICKLE.md, "Scanning"): the `data.pkl` of a zip checkpoint, or
/// the file itself as a bare pickle. Nothing is executed.
///
/// # Errors
/// `Io`; `Format` for a container or pickle that cannot be read at all.
pub fn scan_pickle(path: impl AsRef<Path>) -> Result<Scan> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|e| Error::io(e, path, "cannot scan"))?;
    // SAFETY: as `TorchCheckpoint::open`.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(e, path, "cannot scan"))?;
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

/// Converts the torch checkpoint `input` to `output` as `options` say
/// (safetensors or deathtensors): its tensors, and its plain values as the
/// file's metadata. Leaves that are neither (bytes, sets, ...) are refused
/// naming them, unless `skip_others`.
///
/// # Errors
/// As [`TorchCheckpoint::open`] and [`TorchCheckpoint::read`], and the
/// writer's; `InvalidInput` naming the first other leaf.
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
    let mut data = Vec::new();
    for t in c.tensors() {
        data.push((TensorSpec::new(t.name, t.dtype, t.shape.to_vec()), c.read(t.name)?));
    }
    let mut options = options.clone();
    if !c.metadata().is_empty() {
        let mut meta = options.metadata.take().unwrap_or_default();
        for (k, v) in c.metadata() {
            meta.insert(k.clone(), v.clone());
        }
        options.metadata = Some(meta);
    }
    let tensors = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    save(output, tensors, &options)
}
