//! Opening a file: reading and parsing its head, and what the trust
//! checks decide about it.

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

use deathtensors_format::{parse_rank_metadata_name, Head, Limits, DCP_METADATA, INDEX_SUFFIX, PROBE_LEN};

use super::Reader;
use crate::error::{Error, Result};
use crate::fs::fork::Threads;
use crate::fs::mmap::Mmap;
use crate::fs::pread::{read_exact_at, ReadAt, Source};
use crate::options::ReadOptions;
use crate::trust::access;

/// Reads and parses the head (prefix and header) of a local file.
pub(crate) fn read_head(file: &File, file_len: u64, path: &Path, limits: &Limits) -> Result<Head> {
    read_head_from(file, None, file_len, path, limits, None)
}

/// Heads at least this long are parsed straight from the file's mapping when
/// the caller maps it anyway: copying them out costs a fresh page per 4 KiB
/// (2-4 µs each on a VM; ~1 ms for a 20,000-tensor header), the mapping's
/// pages are the page cache's.
const MAPPED_HEAD_MIN: u64 = 256 << 10;

/// [`read_head`], parsing from the file's mapping when the head is long
/// enough for it to matter and `map` is given (then the mapping is made and
/// kept there, for a reader opened with `open_mmap`).
/// For a signed file whose signature block does not decode: a `Truncated`
/// error with the sizes, if its header says the file is longer than it
/// is (a copy cut short), so that the cut is reported, not the block.
fn signed_truncation(file: &dyn ReadAt, file_len: u64, path: &Path, limits: &Limits) -> Option<Error> {
    let mut probe = vec![0u8; (PROBE_LEN as u64).min(file_len) as usize];
    read_exact_at(file, &mut probe, 0).ok()?;
    let needed = Head::needed(&probe, limits).ok()?;
    let mut bytes = vec![0u8; needed.min(file_len) as usize];
    read_exact_at(file, &mut bytes, 0).ok()?;
    // Parsed as if the file were `LONG` bytes: only the header's own bytes
    // are read, and the tensors' extent they give says where the body
    // ends. The parse refuses the made-up length's unowned bytes, and its
    // error holds the extent: the body is `LONG - data_len + covered`.
    const LONG: u64 = 1 << 60;
    let body_end = match Head::parse(&bytes, LONG, limits) {
        Ok(head) => head.footer().map_or(head.data_end, |(_, end)| end),
        Err(e) => match e.kind() {
            deathtensors_format::ErrorKind::UnownedBytes { covered, data_len } => {
                (LONG - data_len).checked_add(*covered)?
            }
            _ if needed > file_len => needed,
            _ => return None,
        },
    };
    let e = deathtensors_format::signed_file_truncated(body_end, file_len)?;
    Some(Error::format(e, path, "cannot open"))
}

fn read_head_from(
    file: &dyn ReadAt,
    local: Option<&File>,
    file_len: u64,
    path: &Path,
    limits: &Limits,
    map: Option<&OnceLock<std::result::Result<Mmap, String>>>,
) -> Result<Head> {
    let doing = "cannot open";
    let mut probe = vec![0u8; (PROBE_LEN as u64).min(file_len) as usize];
    read_exact_at(file, &mut probe, 0).map_err(|e| Error::io(e, path, doing))?;
    let needed = Head::needed(&probe, limits).map_err(|e| Error::format(e, path, doing))?;
    if needed > file_len {
        let e = deathtensors_format::Head::parse(&probe, file_len, limits).err();
        if let Some(e) = e {
            return Err(Error::format(e, path, doing));
        }
    }
    if let (Some(map), Some(local)) = (map.filter(|_| needed >= MAPPED_HEAD_MIN), local) {
        // SAFETY: `map` is given only for `open_mmap` readers, whose caller
        // took on the contract of `Mmap::map`. A mapping that fails here is
        // made again (and its error reported) on first use.
        if let Ok(m) = unsafe { Mmap::map(local) } {
            let _ = map.set(Ok(m));
        }
        if let Some(m) = map.get().and_then(|m| m.as_ref().ok()) {
            if let Some(bytes) = m.bytes().get(..needed as usize) {
                return Head::parse_with(bytes, file_len, limits, &Threads::releasing(m))
                    .map_err(|e| Error::format(e, path, doing));
            }
        }
    }
    let mut head = vec![0u8; needed as usize];
    read_exact_at(file, &mut head, 0).map_err(|e| Error::io(e, path, doing))?;
    Head::parse_with(&head, file_len, limits, &Threads::default()).map_err(|e| Error::format(e, path, doing))
}

impl Reader {
    /// Opens a file for positioned reads, without mapping it.
    ///
    /// # Errors
    /// - `Io` if the file cannot be opened or read.
    /// - `Format` if the head is malformed (see `docs/FORMAT.md`).
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        Reader::open_with(path, ReadOptions::default())
    }

    /// [`Reader::open`] with options.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<Reader> {
        // SAFETY: not mappable: nothing is mapped.
        unsafe { Reader::open_inner(path.as_ref(), options, false) }
    }

    /// Opens `path`; with `mappable`, the reader may map the file.
    ///
    /// # Safety
    /// With `mappable`, as [`Reader::open_mmap`]; without, none.
    pub(super) unsafe fn open_inner(path: &Path, options: ReadOptions, mappable: bool) -> Result<Reader> {
        // Windows refuses to open a directory as a file; unix opens it, and
        // its first read fails (EISDIR): both are said as what they are.
        let file = File::open(path).map_err(|e| match path.is_dir() {
            true => directory(path),
            false => Error::io(e, path, "cannot open"),
        })?;
        let meta = file.metadata().map_err(|e| Error::io(e, path, "cannot open"))?;
        if meta.is_dir() {
            return Err(directory(path));
        }
        let file_len = meta.len();
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_from(Source::File(file), file_len, path, options, mappable) }
    }

    /// Opens a file whose bytes come from `source` (for example an object on
    /// a remote store, `deathtensors-remote`), `len` bytes long; `name` (its
    /// URL) stands for a path in errors. Everything [`Reader::open_with`]
    /// checks is checked, through positioned reads of `source`: the head is
    /// read with one read of [`PROBE_LEN`](deathtensors_format::PROBE_LEN)
    /// bytes at 0 and one of the whole head (the source may serve the second
    /// from the first). Nothing is ever mapped; every whole-tensor read
    /// ([`Reader::read`], [`Reader::read_data_into`]) checks the bytes
    /// against the tensor's digest when the header has one, and a mismatch
    /// is an error (the buffer is zeroed), never data.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_source(
        source: Box<dyn ReadAt>,
        len: u64,
        name: impl AsRef<Path>,
        options: ReadOptions,
    ) -> Result<Reader> {
        // SAFETY: not mappable: nothing is mapped.
        unsafe { Reader::open_from(Source::Other(source), len, name.as_ref(), options, false) }
    }

    /// Opens the file read through `file`.
    ///
    /// # Safety
    /// With `mappable`, as [`Reader::open_mmap`]; without, none.
    pub(super) unsafe fn open_from(
        file: Source,
        file_len: u64,
        path: &Path,
        options: ReadOptions,
        mappable: bool,
    ) -> Result<Reader> {
        let mut probe = vec![0u8; (PROBE_LEN as u64).min(file_len) as usize];
        read_exact_at(&file, &mut probe, 0).map_err(|e| Error::io(e, path, "cannot open"))?;
        // A signed file is parsed as if its signature block were absent.
        let (body_len, signatures) = access::split_signatures(&file, file_len, &probe, path)
            .map_err(|e| signed_truncation(&file, file_len, path, &options.limits).unwrap_or(e))?;
        let map = OnceLock::new();
        let head = read_head_from(&file, file.file(), body_len, path, &options.limits, mappable.then_some(&map))?;
        if map.get().and_then(|m| m.as_ref().ok()).is_some_and(|m| m.bytes().len() as u64 != file_len) {
            return Err(Error::input("the file changed size while it was opened".to_string(), path, "cannot open"));
        }
        let (trust, unsealed) = access::check(&file, path, &head, signatures, &options)?;
        let head = unsealed.unwrap_or(head);
        let signed_model = options.signed_model.clone();
        let mut reader = Reader {
            path: path.to_path_buf(),
            file,
            file_len,
            head,
            mappable,
            map,
            blob: OnceLock::new(),
            options,
            trust,
            mount: OnceLock::new(),
        };
        if let Some(model) = signed_model {
            reader.commit_to(&model)?;
        }
        Ok(reader)
    }

    /// Opens a file and maps it, for zero-copy access with [`Reader::bytes`].
    ///
    /// # Safety
    /// The file must not be modified or truncated while the `Reader` lives:
    /// a modification changes bytes already validated, and a truncation
    /// makes access to the lost pages kill the process with SIGBUS. Owned
    /// reads ([`Reader::read`]) never touch the mapping and stay safe.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub unsafe fn open_mmap(path: impl AsRef<Path>) -> Result<Reader> {
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_mmap_with(path, ReadOptions::default()) }
    }

    /// [`Reader::open_mmap`] with options.
    ///
    /// # Safety
    /// As [`Reader::open_mmap`].
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub unsafe fn open_mmap_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<Reader> {
        // The mapping is made on first zero-copy access (opening stays as
        // cheap as `open` for callers that never borrow), or at once when
        // the head is parsed from it.
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_inner(path.as_ref(), options, true) }
    }

    /// The mapping, made on first use (only for `open_mmap` readers).
    pub(super) fn map(&self) -> Result<&Mmap> {
        let map = self.map.get_or_init(|| {
            // SAFETY: `mappable` is set only by `open_mmap`, whose caller
            // took on the contract of `Mmap::map`.
            let file = self.file.file().ok_or("a remote file cannot be mapped")?;
            let map = unsafe { Mmap::map(file) }.map_err(|e| e.to_string())?;
            // The file may have changed since its head was read.
            if map.bytes().len() as u64 != self.file_len {
                return Err("the file changed size since it was opened".to_string());
            }
            Ok(map)
        });
        map.as_ref().map_err(|m| Error::input(m.clone(), &self.path, "cannot map"))
    }
}

/// The error for a directory given where a tensor file is wanted (kind
/// `IsADirectory`), saying
/// what the directory holds when it is a checkpoint of files: a
/// distributed checkpoint (its metadata document) or a sharded one (an
/// index).
fn directory(path: &Path) -> Error {
    let names: Vec<String> = std::fs::read_dir(path)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let dcp = names.iter().any(|n| n == DCP_METADATA || parse_rank_metadata_name(n).is_some());
    let mut index: Vec<&String> = names.iter().filter(|n| n.ends_with(INDEX_SUFFIX)).collect();
    index.sort();
    let hint = if dcp {
        ": it holds a distributed checkpoint (`deathtensors consolidate DIR OUT` writes it as one file; \
         deathtensors.distributed.StorageReader loads it)"
            .to_string()
    } else if let Some(index) = index.first() {
        format!(": it holds a sharded checkpoint, open its index {}", path.join(index).display())
    } else {
        String::new()
    };
    // An I/O error of kind IsADirectory, as the system's would be (Python
    // raises IsADirectoryError for it), in words that say what to do.
    let why = std::io::Error::new(std::io::ErrorKind::IsADirectory, format!("is a directory, not a tensor file{hint}"));
    Error::io(why, path, "cannot open")
}
