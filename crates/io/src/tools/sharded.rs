//! Sharded checkpoints: a model split over several files plus an index.
//!
//! Three index forms are read:
//! - Hugging Face's `model.safetensors.index.json` (and our
//!   `model.deathtensors.index.json`, the same scheme):
//!   `{"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard}}`;
//! - deathtensors 0.3.0's index: a `.deathtensors` file with no tensors whose
//!   global metadata has `deathtensors.sharded = "true"` and the shard list
//!   as JSON in `deathtensors.shards`;
//! - a plain single file, as a checkpoint of one shard.
//!
//! Shards are opened only when a tensor in them is asked for. Shard names in
//! an index are untrusted: only plain file names in the index's directory
//! are accepted (no separators, no `..`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use deathtensors_format::{Format, Metadata, TensorSpec};

use crate::error::{Error, ErrorKind, Result};
use crate::file::reader::Reader;
use crate::file::writer::save;
use crate::fs::staged::StagedFiles;
use crate::options::{ReadOptions, WriteOptions};

mod legacy;

pub use legacy::save_sharded_legacy;

/// The largest index file read: an index of a million tensors is ~100 MB.
pub(crate) const MAX_INDEX_LEN: u64 = 256 << 20;

pub use deathtensors_format::INDEX_SUFFIX;

/// Whether `path` names a JSON index (Hugging Face's
/// `model.safetensors.index.json`, or ours): its name ends in `.json`.
/// Anything else is a single file or deathtensors 0.3.0's index
/// ([`is_legacy_index`]), told apart by opening it.
pub fn is_json_index(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".json"))
}

/// Where the files of a sharded checkpoint come from: the local file system
/// ([`ShardedReader::open`]), or another store (`deathtensors-remote`
/// opens URLs), given to [`ShardedReader::open_in`]. Paths are the index's
/// path or URL and its directory joined with a checked shard name.
pub trait Opener: Send + Sync + std::fmt::Debug {
    /// Reads a whole small file (an index), refusing one over `max` bytes.
    ///
    /// # Errors
    /// `Io` if it cannot be read; `InvalidInput` if it is over `max`.
    fn read_small(&self, path: &Path, max: u64) -> Result<Vec<u8>>;

    /// Opens a tensor file (a shard), with the keys and requirements of
    /// the checkpoint's reader.
    ///
    /// # Errors
    /// As [`Reader::open_with`].
    fn open(&self, path: &Path) -> Result<Reader>;

    /// Opens a file to read its header only, with the limits but without
    /// the keys or requirements of [`Opener::open`]: the path given, which
    /// may be a deathtensors 0.3.0 index (a plain, unsigned file without
    /// tensors) rather than a shard.
    ///
    /// # Errors
    /// As [`Reader::open`].
    fn open_plain(&self, path: &Path) -> Result<Reader>;
}

/// Files on the local file system, opened with the same options (keys,
/// requirements): what [`ShardedReader::open_with`] opens with.
#[derive(Debug)]
pub struct LocalOpener {
    options: ReadOptions,
}

impl LocalOpener {
    /// Opens local files with `options`.
    pub fn new(options: ReadOptions) -> LocalOpener {
        LocalOpener { options }
    }
}

impl Opener for LocalOpener {
    fn read_small(&self, path: &Path, max: u64) -> Result<Vec<u8>> {
        let len = std::fs::metadata(path).map_err(|e| Error::io(e, path, "cannot open"))?.len();
        if len > max {
            return Err(invalid(path, format!("index is {len} bytes, over the limit of {max}")));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io(e, path, "cannot open"))?;
        if let Some(model) = &self.options.signed_model {
            model.check_whole(path, &bytes)?;
        }
        Ok(bytes)
    }

    fn open(&self, path: &Path) -> Result<Reader> {
        Reader::open_with(path, self.options.clone())
    }

    fn open_plain(&self, path: &Path) -> Result<Reader> {
        Reader::open_with(path, self.options.limits_only())
    }
}

/// A sharded checkpoint, opened lazily.
#[derive(Debug)]
pub struct ShardedReader {
    opener: Box<dyn Opener>,
    index_path: PathBuf,
    dir: PathBuf,
    shard_names: Vec<String>,
    shards: Vec<OnceLock<Result<Reader>>>,
    /// Tensor names in index order, and the shard each lives in.
    tensors: Vec<(String, usize)>,
    by_name: HashMap<String, usize>,
    metadata: Metadata,
    total_size: Option<u64>,
}

fn invalid(path: &Path, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidCheckpoint(message.into()), Some(path), "invalid sharded checkpoint")
}

/// Accepts a shard name only if it is a plain file name.
pub(crate) fn check_shard_name(index: &Path, name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\\')
        && !name.contains('\0')
        && Path::new(name).file_name().is_some_and(|f| f == name);
    if plain {
        Ok(())
    } else {
        Err(invalid(index, format!("shard name {name:?} is not a plain file name in the index's directory")))
    }
}

/// The metadata key that marks a deathtensors 0.3.0 sharded index (value
/// `"true"`); its shard list is JSON under `deathtensors.shards`.
pub const LEGACY_INDEX_MARKER: &str = "deathtensors.sharded";

/// Whether `reader` is a deathtensors 0.3.0 sharded index: a file without
/// tensors whose metadata has [`LEGACY_INDEX_MARKER`] = `"true"`.
pub fn is_legacy_index(reader: &Reader) -> bool {
    reader.header().is_empty()
        && reader.header().metadata().and_then(|m| m.get(LEGACY_INDEX_MARKER)).is_some_and(|v| v == "true")
}

impl ShardedReader {
    /// Opens a sharded checkpoint from its index (either form) or a single file.
    ///
    /// # Errors
    /// `Io` if the index cannot be read; `InvalidInput` if it is malformed or
    /// names shards outside its directory; `Format` if a plain file is invalid.
    pub fn open(path: impl AsRef<Path>) -> Result<ShardedReader> {
        ShardedReader::open_with(path, ReadOptions::default())
    }

    /// [`ShardedReader::open`], every shard opened with `options` (keys,
    /// trusted signers, requirements, policy input, limits), as
    /// [`Reader::open_with`] opens a file: a shard that fails a requirement
    /// fails the read of its tensors, and [`ShardedReader::verify`].
    ///
    /// # Errors
    /// As [`ShardedReader::open`]; for a single file, as [`Reader::open_with`].
    pub fn open_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<ShardedReader> {
        ShardedReader::open_in(Box::new(LocalOpener::new(options)), path)
    }

    /// [`ShardedReader::open`], with the index and shards opened through
    /// `opener` (for example a remote store's): an index is read whole, and
    /// only the shards holding tensors asked for are opened.
    ///
    /// # Errors
    /// As [`ShardedReader::open`].
    pub fn open_in(opener: Box<dyn Opener>, path: impl AsRef<Path>) -> Result<ShardedReader> {
        let path = path.as_ref();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        if is_json_index(path) {
            return ShardedReader::open_json_index(opener, path, dir);
        }
        let reader = match opener.open(path) {
            Ok(reader) => reader,
            Err(e) => {
                // A deathtensors 0.3.0 index is a plain, unsigned file: the
                // requirements, meant for the shards, refuse it.
                if let Some(plain) = opener.open_plain(path).ok().filter(is_legacy_index) {
                    return ShardedReader::from_reader(opener, path, plain);
                }
                return Err(e);
            }
        };
        ShardedReader::from_reader(opener, path, reader)
    }

    /// [`ShardedReader::open_in`] of a file at `path` already opened as
    /// `reader` (a caller that looked at it first, to tell an index from a
    /// file, need not open it twice): a deathtensors 0.3.0 index
    /// ([`is_legacy_index`]) lists the shards `opener` opens; any other
    /// file is a checkpoint of one shard, `reader` itself.
    ///
    /// # Errors
    /// `InvalidInput` if the index's shard list is malformed or names shards
    /// outside its directory.
    pub fn from_reader(opener: Box<dyn Opener>, path: impl AsRef<Path>, reader: Reader) -> Result<ShardedReader> {
        let path = path.as_ref();
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let meta = reader.header().metadata().cloned().unwrap_or_default();
        if is_legacy_index(&reader) {
            return ShardedReader::open_legacy_index(opener, path, dir, meta);
        }
        // A single file: one shard.
        let tensors: Vec<(String, usize)> =
            reader.header().tensors().iter().map(|t| (String::from(&t.name), 0)).collect();
        let total = reader.header().data_len();
        let shard_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        let cell = OnceLock::new();
        let _ = cell.set(Ok(reader));
        Ok(ShardedReader::build(opener, path, dir, vec![shard_name], vec![cell], tensors, meta, Some(total)))
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        opener: Box<dyn Opener>,
        index_path: &Path,
        dir: PathBuf,
        shard_names: Vec<String>,
        shards: Vec<OnceLock<Result<Reader>>>,
        tensors: Vec<(String, usize)>,
        metadata: Metadata,
        total_size: Option<u64>,
    ) -> ShardedReader {
        let by_name = tensors.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)).collect();
        ShardedReader {
            opener,
            index_path: index_path.to_path_buf(),
            dir,
            shard_names,
            shards,
            tensors,
            by_name,
            metadata,
            total_size,
        }
    }

    fn open_json_index(opener: Box<dyn Opener>, path: &Path, dir: PathBuf) -> Result<ShardedReader> {
        let text = opener.read_small(path, MAX_INDEX_LEN)?;
        let value: serde_json::Value =
            serde_json::from_slice(&text).map_err(|e| invalid(path, format!("index is not valid JSON: {e}")))?;
        let obj = value.as_object().ok_or_else(|| invalid(path, "index is not a JSON object"))?;
        let map = obj
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| invalid(path, "index has no \"weight_map\" object"))?;
        let mut metadata = Metadata::new();
        let mut total_size = None;
        if let Some(meta) = obj.get("metadata") {
            let meta = meta.as_object().ok_or_else(|| invalid(path, "index \"metadata\" is not an object"))?;
            for (k, v) in meta {
                if k == "total_size" {
                    total_size = Some(v.as_u64().ok_or_else(|| invalid(path, "\"total_size\" is not an integer"))?);
                }
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                metadata.insert(k.clone(), text);
            }
        }
        let mut shard_names: Vec<String> = Vec::new();
        let mut shard_index: HashMap<String, usize> = HashMap::new();
        let mut tensors = Vec::with_capacity(map.len());
        for (tensor, shard) in map {
            let shard = shard.as_str().ok_or_else(|| invalid(path, format!("shard of {tensor:?} is not a string")))?;
            check_shard_name(path, shard)?;
            let i = *shard_index.entry(shard.to_string()).or_insert_with(|| {
                shard_names.push(shard.to_string());
                shard_names.len() - 1
            });
            tensors.push((tensor.clone(), i));
        }
        let shards = shard_names.iter().map(|_| OnceLock::new()).collect();
        Ok(ShardedReader::build(opener, path, dir, shard_names, shards, tensors, metadata, total_size))
    }

    fn open_legacy_index(opener: Box<dyn Opener>, path: &Path, dir: PathBuf, meta: Metadata) -> Result<ShardedReader> {
        #[derive(serde::Deserialize)]
        struct Shard {
            path: String,
            tensors: Vec<String>,
        }
        let list =
            meta.get("deathtensors.shards").ok_or_else(|| invalid(path, "index lacks \"deathtensors.shards\""))?;
        let shards: Vec<Shard> = serde_json::from_str(list)
            .map_err(|e| invalid(path, format!("\"deathtensors.shards\" is not a list of shards: {e}")))?;
        let mut shard_names = Vec::new();
        let mut tensors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, s) in shards.into_iter().enumerate() {
            check_shard_name(path, &s.path)?;
            for t in &s.tensors {
                // deathtensors 0.3.0 lets the last shard listing a name win.
                if !seen.insert(t.clone()) {
                    return Err(invalid(path, format!("tensor {t:?} is listed in two shards")));
                }
            }
            shard_names.push(s.path);
            tensors.extend(s.tensors.into_iter().map(|t| (t, i)));
        }
        let metadata = meta
            .into_iter()
            .filter(|(k, _)| !k.starts_with("deathtensors.shard") && k != LEGACY_INDEX_MARKER)
            .collect();
        let cells = shard_names.iter().map(|_| OnceLock::new()).collect();
        Ok(ShardedReader::build(opener, path, dir, shard_names, cells, tensors, metadata, None))
    }

    /// The index (or single file) this checkpoint was opened from.
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// Tensor names in index order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|(n, _)| n.as_str())
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the checkpoint has no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// Whether there is a tensor of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The index's metadata (Hugging Face `metadata`, with `total_size` as a
    /// string; or the legacy index's global metadata).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// `metadata.total_size` of the index, if it has one.
    pub fn total_size(&self) -> Option<u64> {
        self.total_size
    }

    /// Shard file paths, in the index's order.
    pub fn shard_paths(&self) -> Vec<PathBuf> {
        self.shard_names.iter().map(|n| self.dir.join(n)).collect()
    }

    /// How many shards have been opened so far.
    pub fn opened_shards(&self) -> usize {
        self.shards.iter().filter(|s| s.get().is_some()).count()
    }

    /// The `i`th shard's reader (in [`ShardedReader::shard_paths`] order),
    /// opened on first use.
    ///
    /// # Errors
    /// Errors opening the shard; `InvalidInput` if `i` is out of range.
    pub fn shard_reader(&self, i: usize) -> Result<&Reader> {
        if i >= self.shard_names.len() {
            return Err(invalid(&self.index_path, format!("no shard {i}")));
        }
        self.shard(i)
    }

    /// The index of the shard that holds `name`, without opening it.
    pub fn shard_index_of(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).map(|&k| self.tensors[k].1)
    }

    /// The `i`th shard, opened once: a shard that cannot be opened (or
    /// fails a requirement) gives the same error, of its own kind, each time.
    fn shard(&self, i: usize) -> Result<&Reader> {
        let path = self.dir.join(&self.shard_names[i]);
        self.shards[i].get_or_init(|| self.opener.open(&path)).as_ref().map_err(Error::clone)
    }

    /// The shard holding `name`, opened on first use.
    ///
    /// # Errors
    /// `TensorNotFound`; errors opening the shard; `InvalidInput` if the
    /// shard does not contain the tensor the index says it does.
    pub fn reader_of(&self, name: &str) -> Result<&Reader> {
        let &k = self.by_name.get(name).ok_or_else(|| {
            Error::new(ErrorKind::TensorNotFound(name.to_string()), Some(&self.index_path), "cannot read")
        })?;
        let shard = self.shard(self.tensors[k].1)?;
        // A sealed shard lists its tensors only to a key holder: NoKey.
        shard.check_not_hidden()?;
        if shard.header().get(name).is_none() {
            return Err(invalid(
                shard.path(),
                format!("the index puts tensor {name:?} in this shard, which does not contain it"),
            ));
        }
        Ok(shard)
    }

    /// Reads a tensor's bytes (owned).
    ///
    /// # Errors
    /// As [`ShardedReader::reader_of`] and [`Reader::read`].
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        self.reader_of(name)?.read(name)
    }

    /// Opens every shard and checks that the index and the shards agree
    /// (every tensor where the index says, no tensor missing from the
    /// index, `total_size` if given), and every checksum the shards carry.
    ///
    /// # Errors
    /// The first inconsistency or failed checksum, naming the shard.
    pub fn verify(&self) -> Result<()> {
        let mut total = 0u64;
        for i in 0..self.shard_names.len() {
            let shard = self.shard(i)?;
            // A sealed shard's tensors are hidden without a key: nothing to compare.
            shard.check_not_hidden()?;
            let listed: Vec<&str> = self.tensors.iter().filter(|(_, s)| *s == i).map(|(n, _)| n.as_str()).collect();
            for name in &listed {
                if shard.header().get(name).is_none() {
                    return Err(invalid(shard.path(), format!("tensor {name:?} of the index is missing")));
                }
            }
            if let Some(extra) = shard
                .header()
                .tensors()
                .iter()
                .find(|t| self.by_name.get(t.name.as_str()).map(|&k| self.tensors[k].1) != Some(i))
            {
                return Err(invalid(shard.path(), format!("tensor {:?} is not in the index", extra.name)));
            }
            total += shard.header().tensors().iter().map(|t| t.byte_len()).sum::<u64>();
            match shard.verify() {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), ErrorKind::NoChecksum { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        if let Some(expected) = self.total_size {
            if expected != total {
                return Err(invalid(
                    &self.index_path,
                    format!("total_size says {expected} bytes, the shards hold {total}"),
                ));
            }
        }
        Ok(())
    }
}

/// Where the shards and the index of a sharded save go, from the path the
/// caller gave: `dir/model` (or `dir/model.<ext>`, or the index path).
fn stem_of(path: &Path) -> PathBuf {
    let mut s = path.to_string_lossy().into_owned();
    if let Some(x) = s.strip_suffix(INDEX_SUFFIX) {
        s = x.to_string();
    }
    for e in [".deathtensors", ".safetensors", ".dt"] {
        if let Some(x) = s.strip_suffix(e) {
            s = x.to_string();
            break;
        }
    }
    PathBuf::from(s)
}

/// Creates the folder a checkpoint's index and shards go in, and its
/// parents, if missing (`save_sharded("out/model", ...)` without `out/`).
pub(crate) fn create_parent(path: &Path) -> Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| Error::io(e, dir, "cannot create the folder of")),
        None => Ok(()),
    }
}

/// Saves tensors over shards of at most `max_shard_bytes` of tensor data
/// (a larger tensor gets a shard of its own), named
/// `<stem>-00001-of-0000N.<ext>`, plus `<stem>.<ext>.index.json` in Hugging
/// Face's scheme. Tensors keep their order. Every shard and the index are
/// written under temp names first and then renamed into place, the index
/// last ([`StagedFiles`]), so a reader never sees an index naming missing
/// shards, and a save that fails (a full disk) leaves nothing it wrote and
/// replaces nothing: an older checkpoint at the same names, index and
/// shards, stays whole and loadable.
///
/// Returns the index path and the shard paths.
///
/// # Errors
/// As [`save`]; `InvalidInput` if `max_shard_bytes` is 0.
pub fn save_sharded(
    path: impl AsRef<Path>,
    tensors: Vec<(TensorSpec, &[u8])>,
    max_shard_bytes: u64,
    options: &WriteOptions,
) -> Result<(PathBuf, Vec<PathBuf>)> {
    let path = path.as_ref();
    if max_shard_bytes == 0 {
        return Err(Error::input("max_shard_bytes must be positive", path, "cannot write"));
    }
    create_parent(path)?;
    let ext = match options.format {
        Format::Deathtensors => "deathtensors",
        Format::Safetensors => "safetensors",
        Format::Bintensors => "bt",
    };
    let stem = stem_of(path);
    let mut groups: Vec<Vec<(TensorSpec, &[u8])>> = vec![Vec::new()];
    let mut size = 0u64;
    let mut total = 0u64;
    for (spec, bytes) in tensors {
        let n = bytes.len() as u64;
        if size > 0 && size + n > max_shard_bytes {
            groups.push(Vec::new());
            size = 0;
        }
        size += n;
        total += n;
        if let Some(g) = groups.last_mut() {
            g.push((spec, bytes));
        }
    }
    let count = groups.len();
    let stem_name = stem.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut weight_map: BTreeMap<String, String> = BTreeMap::new();
    let mut paths = Vec::with_capacity(count);
    let mut staged = StagedFiles::new(options.durable);
    for (i, group) in groups.into_iter().enumerate() {
        let file = format!("{stem_name}-{:05}-of-{count:05}.{ext}", i + 1);
        for (spec, _) in &group {
            weight_map.insert(spec.name.clone(), file.clone());
        }
        let shard_path = stem.with_file_name(&file);
        staged.write(&shard_path, |at| save(at, group, options))?;
        paths.push(shard_path);
    }
    let index_path = stem.with_file_name(format!("{stem_name}.{ext}{INDEX_SUFFIX}"));
    let entries: Vec<(String, String)> = weight_map.into_iter().collect();
    staged.write(&index_path, |at| write_index(at, &entries, total, options.metadata.as_ref(), options.durable))?;
    staged.commit()?;
    Ok((index_path, paths))
}

/// Writes an index in Hugging Face's scheme, atomically:
/// `{"metadata": {"total_size": N, ...}, "weight_map": {tensor: shard}}`.
/// `metadata` entries are added as strings (a `total_size` among them is
/// ignored: the argument is the truth).
///
/// # Errors
/// `InvalidInput` for a shard that is not a plain file name; `Io`.
pub fn write_index(
    index_path: &Path,
    weight_map: &[(String, String)],
    total_size: u64,
    metadata: Option<&Metadata>,
    durable: bool,
) -> Result<()> {
    let mut meta = serde_json::Map::new();
    meta.insert("total_size".into(), total_size.into());
    for (k, v) in metadata.into_iter().flatten() {
        if k != "total_size" {
            meta.insert(k.clone(), v.clone().into());
        }
    }
    let mut map = serde_json::Map::new();
    for (tensor, shard) in weight_map {
        check_shard_name(index_path, shard)?;
        map.insert(tensor.clone(), shard.clone().into());
    }
    let index = serde_json::json!({ "metadata": meta, "weight_map": map });
    let text =
        serde_json::to_vec_pretty(&index).map_err(|e| Error::input(e.to_string(), index_path, "cannot write"))?;
    crate::fs::atomic::write_file(index_path, &text, durable).map_err(|e| Error::io(e, index_path, "cannot write"))
}
