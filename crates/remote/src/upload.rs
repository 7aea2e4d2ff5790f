//! Writing to object stores: a local file uploaded in parts with bounded
//! memory, a small object put whole, and what a commit protocol needs
//! besides (the size of an object, a small object read whole, the objects
//! under a prefix, deletion).
//!
//! Each object store makes an object visible only once its upload is
//! complete (a single PUT, or the completion of a multipart upload), and
//! replaces an older object of the same name atomically: a reader sees the
//! old object or the new one, never part of either. A distributed
//! checkpoint builds its commit on that (`docs/DISTRIBUTED.md`).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path as FsPath;
use std::sync::Arc;

use bytes::Bytes;
use deathtensors_io::{Error, Result};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use crate::options::RemoteOptions;
use crate::runtime::block_on;
use crate::store;

/// S3's smallest part (every part but the last): 5 MiB.
const MIN_PART: u64 = 5 << 20;
/// S3's (and GCS's XML API's) most parts in one upload.
const MAX_PARTS: u64 = 10_000;

/// The store an object is in, its path there, and the resolved options.
struct Target {
    store: Arc<dyn ObjectStore>,
    location: Path,
    options: RemoteOptions,
}

fn target(url: &str, options: &RemoteOptions, doing: &'static str) -> Result<Target> {
    let name = FsPath::new(url);
    let resolved = options.resolve().map_err(|e| Error::from_io(e, name, doing))?;
    let (store, location) = store::build(url, &resolved).map_err(|e| Error::from_io(e, name, doing))?;
    Ok(Target { store, location, options: resolved.options })
}

/// An object_store error as an I/O error of the matching kind, in words.
fn io_error(e: &object_store::Error) -> io::Error {
    use object_store::Error as E;
    let kind = match e {
        E::NotFound { .. } => io::ErrorKind::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        E::AlreadyExists { .. } | E::Precondition { .. } => io::ErrorKind::AlreadyExists,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, store::causes(e))
}

/// The size of the parts a file of `len` bytes is uploaded in: `part_size`,
/// at least S3's minimum, and large enough that the file fits in S3's
/// 10 000 parts.
fn part_len(len: u64, part_size: u64) -> u64 {
    part_size.max(MIN_PART).max(len.div_ceil(MAX_PARTS))
}

/// Puts `data` as the object at `url` with one request: visible whole once
/// the request succeeds, replacing any object of that name atomically.
///
/// # Errors
/// - `Io` if the store refuses or the request fails after its retries
///   (`PermissionDenied`, `TimedOut`, ...).
/// - `InvalidInput` (as `Io`) for a URL or option as [`open`](crate::open)
///   refuses them.
pub fn put(url: &str, data: Vec<u8>, options: &RemoteOptions) -> Result<()> {
    const DOING: &str = "cannot upload";
    let t = target(url, options, DOING)?;
    let len = data.len() as u64;
    let fail = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    block_on(t.store.put(&t.location, PutPayload::from(data))).map_err(fail)?.map_err(|e| fail(io_error(&e)))?;
    t.options.stats.sent(1, len);
    Ok(())
}

/// Uploads the local file at `path` as the object at `url` and returns its
/// length. A file of at most one part goes in one PUT; a longer one in a
/// multipart upload of parts of [`RemoteOptions::part_size`] (at least
/// 5 MiB, more for files over 10 000 parts), at most
/// [`RemoteOptions::concurrency`] in flight: memory stays under
/// (`concurrency` + 1) parts, 72 MiB with the defaults, whatever the file's
/// size. The object is visible only once the upload completes; an upload
/// that fails is aborted (its parts discarded), and an older object of that
/// name stays as it was.
///
/// # Errors
/// - `Io` naming `path` if the file cannot be read (or shrinks while read).
/// - `Io` naming `url` as [`put`].
pub fn upload(path: &FsPath, url: &str, options: &RemoteOptions) -> Result<u64> {
    const DOING: &str = "cannot upload";
    let t = target(url, options, DOING)?;
    let local = |e: io::Error| Error::from_io(e, path, "cannot read for upload");
    let mut file = File::open(path).map_err(local)?;
    let len = file.metadata().map_err(local)?.len();
    let part = part_len(len, t.options.part_size);
    let remote = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    if len <= part {
        let mut data = Vec::with_capacity(len as usize);
        file.read_to_end(&mut data).map_err(local)?;
        drop(file);
        return put(url, data, options).map(|()| len);
    }
    let concurrency = t.options.concurrency.max(1);
    let parts = len.div_ceil(part);
    let sent = block_on(async {
        let upload = t.store.put_multipart(&t.location).await.map_err(|e| Step::Remote(io_error(&e)))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, part as usize);
        let mut left = len;
        while left > 0 {
            // Back pressure: read the next part only once fewer than
            // `concurrency` are in flight.
            if let Err(e) = writer.wait_for_capacity(concurrency).await {
                let _ = writer.abort().await;
                return Err(Step::Remote(io_error(&e)));
            }
            let n = left.min(part);
            let mut buf = vec![0u8; n as usize];
            if let Err(e) = file.read_exact(&mut buf) {
                let _ = writer.abort().await;
                return Err(Step::Local(e));
            }
            writer.put(Bytes::from(buf));
            left -= n;
        }
        writer.finish().await.map_err(|e| Step::Remote(io_error(&e)))?;
        Ok(len)
    })
    .map_err(remote)?
    .map_err(|step| match step {
        Step::Local(e) => local(e),
        Step::Remote(e) => remote(e),
    })?;
    // The parts, and the requests that start and complete the upload.
    t.options.stats.sent(parts + 2, len);
    Ok(sent)
}

/// Which side of an upload failed.
enum Step {
    Local(io::Error),
    Remote(io::Error),
}

/// The size of the object at `url` (one HEAD request), or `None` if there
/// is none.
///
/// # Errors
/// As [`put`], for any answer but "no such object".
pub fn size(url: &str, options: &RemoteOptions) -> Result<Option<u64>> {
    const DOING: &str = "cannot stat";
    let t = target(url, options, DOING)?;
    let fail = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    t.options.stats.request();
    match block_on(t.store.head(&t.location)).map_err(fail)? {
        Ok(meta) => Ok(Some(meta.size)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(fail(io_error(&e))),
    }
}

/// The whole object at `url` (one GET), or `None` if there is none. An
/// object longer than `max` bytes is refused before its body is read.
///
/// # Errors
/// - `Io` of kind `InvalidData` for an object over `max` bytes.
/// - As [`put`], for any other answer but "no such object".
pub fn get(url: &str, max: u64, options: &RemoteOptions) -> Result<Option<Vec<u8>>> {
    const DOING: &str = "cannot read";
    let t = target(url, options, DOING)?;
    let fail = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    t.options.stats.request();
    let fetched = block_on(async {
        let got = match t.store.get_opts(&t.location, GetOptions::default()).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(io_error(&e)),
        };
        let len = got.meta.size;
        if len > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{len} bytes, over the limit of {max}")));
        }
        got.bytes().await.map(|b| Some(b.to_vec())).map_err(|e| io_error(&e))
    })
    .map_err(fail)?
    .map_err(fail)?;
    if let Some(bytes) = &fetched {
        t.options.stats.received(bytes.len() as u64);
    }
    Ok(fetched)
}

/// The objects directly under the prefix `url` (`s3://bucket/ckpt` lists
/// `s3://bucket/ckpt/*`, not deeper), as names relative to it with their
/// sizes, in no particular order. A listing takes one request per 1000
/// objects.
///
/// # Errors
/// As [`put`].
pub fn list(url: &str, options: &RemoteOptions) -> Result<Vec<(String, u64)>> {
    const DOING: &str = "cannot list";
    let t = target(url, options, DOING)?;
    let fail = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    let prefix = (!t.location.as_ref().is_empty()).then_some(&t.location);
    t.options.stats.request();
    let listed = block_on(t.store.list_with_delimiter(prefix)).map_err(fail)?.map_err(|e| fail(io_error(&e)))?;
    Ok(listed
        .objects
        .into_iter()
        .filter_map(|o| o.location.filename().map(|name| (name.to_string(), o.size)))
        .collect())
}

/// Deletes the object at `url`. Deleting an object that is not there is
/// not an error (some stores cannot tell).
///
/// # Errors
/// As [`put`].
pub fn delete(url: &str, options: &RemoteOptions) -> Result<()> {
    const DOING: &str = "cannot delete";
    let t = target(url, options, DOING)?;
    let fail = |e: io::Error| Error::from_io(e, FsPath::new(url), DOING);
    t.options.stats.sent(1, 0);
    match block_on(t.store.delete(&t.location)).map_err(fail)? {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(fail(io_error(&e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_at_least_five_mib_and_at_most_ten_thousand() {
        assert_eq!(part_len(1 << 30, 8 << 20), 8 << 20);
        assert_eq!(part_len(1 << 30, 1 << 20), MIN_PART);
        let huge = 1u64 << 40;
        assert!(huge.div_ceil(part_len(huge, 8 << 20)) <= MAX_PARTS);
    }
}
