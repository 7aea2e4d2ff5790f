//! Opening remote checkpoints: single files and sharded ones.

use std::path::Path;

use deathtensors_io::{Error, LocalOpener, Opener, ReadOptions, Reader, Result, ShardedReader};

use crate::object::Object;
use crate::options::RemoteOptions;
use crate::store;

/// URL schemes opened remotely (lowercase, with `://`); anything else is a
/// local path.
pub const SCHEMES: [&str; 8] = ["s3://", "s3a://", "gs://", "az://", "abfs://", "azure://", "http://", "https://"];

/// Whether `location` is a URL this crate opens (`s3://`, `gs://`, `az://`,
/// `abfs://`, `azure://`, `http://`, `https://`), not a local path.
pub fn is_url(location: &str) -> bool {
    SCHEMES.iter().any(|s| location.len() > s.len() && location[..s.len()].eq_ignore_ascii_case(s))
}

/// The URL `location` holds, if it is one ([`is_url`]), else `None` (a
/// local path): the test every `*_any` opener makes.
pub fn url_of(location: &Path) -> Option<&str> {
    location.to_str().filter(|l| is_url(l))
}

/// The object at `url`, and its length (the first request).
fn object(url: &str, options: &RemoteOptions) -> Result<(Object, u64)> {
    let name = Path::new(url);
    let resolved = options.resolve().map_err(|e| Error::from_io(e, name, "cannot open"))?;
    let (store, location) = store::build(url, &resolved).map_err(|e| Error::from_io(e, name, "cannot open"))?;
    let object = Object::new(store, location, url, &resolved.options);
    let len = object.len().map_err(|e| Error::from_io(e, name, "cannot open"))?;
    Ok((object, len))
}

/// Opens the checkpoint file at `url`: its prefix and header with at most 2
/// requests, everything `Reader::open_with` checks checked. Errors name the
/// URL where they name a path.
///
/// # Errors
/// - `Io` if the object cannot be read (`NotFound`, `PermissionDenied`, a
///   server that ignores `Range`, a transfer that fails after its retries,
///   an object replaced since the first request).
/// - `Io` of kind `TimedOut` for a server that does not answer (or stalls)
///   within [`RemoteOptions::retry_timeout`] (50 s by default), and
///   `ConnectionRefused` for one that refuses connections after the
///   retries.
/// - `InvalidInput` (as `Io`) for a URL of no supported store, an unknown
///   storage option, a malformed value of one this crate reads, or an
///   `http://` URL with `allow_http` false.
/// - As [`Reader::open_with`] for the file's contents.
pub fn open(url: &str, options: &RemoteOptions, read_options: ReadOptions) -> Result<Reader> {
    let (object, len) = object(url, options)?;
    Reader::open_source(Box::new(object), len, url, read_options)
}

/// Opens a sharded checkpoint from the URL of its index (or of a single
/// file): the index is read whole (at most 256 MiB), and a shard, named in
/// the index relative to it, is opened when a tensor in it is first asked
/// for.
///
/// # Errors
/// As [`open`] and `ShardedReader::open`.
pub fn open_sharded(url: &str, options: &RemoteOptions, read_options: ReadOptions) -> Result<ShardedReader> {
    ShardedReader::open_in(Box::new(RemoteOpener::new(options.clone(), read_options)), url)
}

/// Opens `location`, a URL ([`is_url`]) through [`open`] or a local path
/// through `Reader::open_with`: the one place where a front end (the CLI,
/// the Python bindings) chooses between the two.
///
/// # Errors
/// As [`open`] for a URL, as `Reader::open_with` for a path.
pub fn open_any(location: impl AsRef<Path>, options: &RemoteOptions, read_options: ReadOptions) -> Result<Reader> {
    let location = location.as_ref();
    match url_of(location) {
        Some(url) => open(url, options, read_options),
        None => Reader::open_with(location, read_options),
    }
}

/// Opens a sharded checkpoint (or a single file) at `location`, a URL
/// through [`open_sharded`] or a local path through
/// `ShardedReader::open_with`.
///
/// # Errors
/// As [`open_sharded`] and `ShardedReader::open_with`.
pub fn open_sharded_any(
    location: impl AsRef<Path>,
    options: &RemoteOptions,
    read_options: ReadOptions,
) -> Result<ShardedReader> {
    let location = location.as_ref();
    match url_of(location) {
        Some(url) => open_sharded(url, options, read_options),
        None => ShardedReader::open_with(location, read_options),
    }
}

/// [`open_sharded_any`] of a file at `location` already opened as `reader`
/// (by [`open_any`] with `read_options`, for example to tell an index from
/// a file): it is not opened again, so a URL is fetched once.
///
/// # Errors
/// As `ShardedReader::from_reader`.
pub fn open_sharded_from(
    location: impl AsRef<Path>,
    options: &RemoteOptions,
    read_options: ReadOptions,
    reader: Reader,
) -> Result<ShardedReader> {
    let location = location.as_ref();
    let opener: Box<dyn Opener> = match url_of(location) {
        Some(_) => Box::new(RemoteOpener::new(options.clone(), read_options)),
        None => Box::new(LocalOpener::new(read_options)),
    };
    ShardedReader::from_reader(opener, location, reader)
}

/// Fetches the bytes of the named tensors of a remote `reader` ahead, ranges
/// closer than [`RemoteOptions::coalesce_gap`] coalesced into one, so that
/// reading them one by one next costs no more requests. A local reader, or
/// a name not in the file, is left alone (the read reports it).
///
/// # Errors
/// As the reads of [`open`].
pub fn prefetch(reader: &Reader, names: &[&str]) -> Result<()> {
    reader.prefetch(names)
}

/// Opens the files of a sharded checkpoint on a remote store, for
/// `ShardedReader::open_in`.
#[derive(Debug)]
pub struct RemoteOpener {
    options: RemoteOptions,
    read_options: ReadOptions,
}

impl RemoteOpener {
    /// Opens files with these options.
    pub fn new(options: RemoteOptions, read_options: ReadOptions) -> RemoteOpener {
        RemoteOpener { options, read_options }
    }
}

impl Opener for RemoteOpener {
    fn read_small(&self, path: &Path, max: u64) -> Result<Vec<u8>> {
        let url = path.to_string_lossy();
        let (object, len) = object(&url, &self.options)?;
        if len > max {
            return Err(Error::from_io(
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{len} bytes, over the limit of {max}")),
                path,
                "cannot open",
            ));
        }
        let mut bytes = vec![0u8; len as usize];
        deathtensors_io::ReadAt::read_exact_at(&object, &mut bytes, 0)
            .map_err(|e| Error::from_io(e, path, "cannot open"))?;
        Ok(bytes)
    }

    fn open(&self, path: &Path) -> Result<Reader> {
        open(&path.to_string_lossy(), &self.options, self.read_options.clone())
    }

    fn open_plain(&self, path: &Path) -> Result<Reader> {
        open(&path.to_string_lossy(), &self.options, self.read_options.limits_only())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_paths_are_paths_never_urls() {
        for path in [r"C:\models\m.dt", "C:/models/m.dt", r"\\server\share\m.dt", "c:m.dt", r"Z:\s3\m.dt", "s3:/m.dt"] {
            assert!(!is_url(path), "{path}");
            assert_eq!(url_of(Path::new(path)), None, "{path}");
        }
        for url in ["s3://b/m.dt", "S3://b/m.dt", "https://h/m.dt", "az://c/m.dt"] {
            assert!(is_url(url), "{url}");
        }
    }
}
