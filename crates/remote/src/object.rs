//! One remote object read with ranged GETs: [`Object`] implements io's
//! [`ReadAt`], so a `Reader` reads it as it reads a file.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use deathtensors_io::ReadAt;
use futures::{StreamExt, TryStreamExt};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::time::Instant;

use crate::options::RemoteOptions;
use crate::runtime::block_on;

/// The longest head kept: above io's 100 MiB header limit, so any head
/// that opens is kept whole, and no more.
const HEAD_CACHE_MAX: u64 = 128 << 20;

/// What the first response said about the object.
#[derive(Debug)]
struct Known {
    len: u64,
    /// Every later request is conditional on it (`If-Match`) and its
    /// response must carry it: a replaced object is an error.
    etag: Option<String>,
}

/// Bytes fetched ahead by [`Object::prefetch`], served to the reads that
/// follow and dropped once all read.
#[derive(Debug)]
struct Block {
    start: u64,
    bytes: Vec<u8>,
    /// Bytes of the block not yet read.
    left: u64,
}

/// A remote object: the store, the object's path, and what its first
/// response told.
pub(crate) struct Object {
    store: Arc<dyn ObjectStore>,
    location: Path,
    url: String,
    options: RemoteOptions,
    known: OnceLock<Result<Known, (io::ErrorKind, String)>>,
    /// The object's first bytes, `0..head.len()`: the first response's, and
    /// a longer head's when it is read. The prefix and header are read
    /// twice by the reader (a probe, then the whole head), once from here.
    head: Mutex<Vec<u8>>,
    blocks: Mutex<Vec<Block>>,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Object({})", self.url)
    }
}

/// An error that says what happened and at which bytes; the object's URL
/// is said once, by the reader's error that carries this one.
fn failed(kind: io::ErrorKind, range: &Range<u64>, message: impl std::fmt::Display) -> io::Error {
    io::Error::new(kind, format!("{message} (reading bytes {}..{})", range.start, range.end))
}

/// The innermost cause of an error: what a person can act on (e.g. "dns
/// error: failed to lookup address"), without the layers above it.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// A failure another attempt may not see: a connection or a server that
/// failed while sending a body, not an answer about the object.
struct Failure {
    error: io::Error,
    transient: bool,
}

impl Failure {
    fn fatal(error: io::Error) -> Failure {
        Failure { error, transient: false }
    }

    /// A failure while receiving a body: ours to retry when object_store
    /// did not (it retries a body only when the object has an ETag), and
    /// the failure is of the connection, not of the bytes sent.
    fn in_body(mut self, store_retried: bool) -> Failure {
        self.transient = !store_retried && self.error.kind() != io::ErrorKind::InvalidData;
        self
    }
}

/// What went wrong on the wire, as object_store's client saw it, and
/// whether the connection was refused.
fn transport(e: &object_store::Error) -> (Option<HttpErrorKind>, bool) {
    let mut kind = None;
    let mut refused = false;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<HttpError>() {
            kind = kind.or(Some(h.kind()));
        }
        if let Some(io) = s.downcast_ref::<io::Error>() {
            refused |= io.kind() == io::ErrorKind::ConnectionRefused;
        }
        source = s.source();
    }
    (kind, refused)
}

/// An object_store error as an I/O error of the right kind that says what
/// happened in words. Not transient: object_store has retried it.
fn from_store(e: object_store::Error, range: &Range<u64>, options: &RemoteOptions) -> Failure {
    use object_store::Error as E;
    let (kind, message) = match &e {
        E::NotFound { .. } => (io::ErrorKind::NotFound, "no such object".to_string()),
        E::Precondition { .. } => (
            io::ErrorKind::Other,
            "the object changed since it was opened (its ETag no longer matches): reopen it".to_string(),
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => (io::ErrorKind::PermissionDenied, e.to_string()),
        E::NotSupported { .. } if e.to_string().contains("Range") => (
            io::ErrorKind::Unsupported,
            "the server does not support HTTP Range requests, which reading part of a file needs".to_string(),
        ),
        E::NotSupported { .. } | E::NotImplemented { .. } | E::InvalidPath { .. } => {
            (io::ErrorKind::Unsupported, e.to_string())
        }
        _ => {
            let text = crate::store::causes(&e);
            // A server that answers a ranged GET with the whole object (200)
            // or with other bytes is no transient failure.
            // object_store's words for these (`GetResultError`).
            let range_error = ["non-partial response", "Content-Range header", "CONTENT_RANGE header", "Requested "];
            let retries = match options.retries {
                1 => "after 1 retry".to_string(),
                n => format!("after {n} retries"),
            };
            match transport(&e) {
                _ if range_error.iter().any(|w| text.contains(w)) => (
                    io::ErrorKind::InvalidData,
                    format!(
                        "the server did not answer the byte range asked for (it must support HTTP Range requests): {}",
                        innermost(&e)
                    ),
                ),
                (Some(HttpErrorKind::Timeout), _) => (
                    io::ErrorKind::TimedOut,
                    format!("timed out waiting for the server ({retries}, each with timeout {:?})", options.timeout),
                ),
                (Some(HttpErrorKind::Connect), true) => {
                    (io::ErrorKind::ConnectionRefused, format!("connection refused ({retries})"))
                }
                (Some(HttpErrorKind::Connect), false) => {
                    (io::ErrorKind::Other, format!("cannot connect ({retries}): {}", innermost(&e)))
                }
                _ => (io::ErrorKind::Other, text),
            }
        }
    };
    Failure::fatal(failed(kind, range, message))
}

impl Object {
    /// The object at `location` of `store`; nothing is requested yet.
    pub(crate) fn new(store: Arc<dyn ObjectStore>, location: Path, url: &str, options: &RemoteOptions) -> Object {
        Object {
            store,
            location,
            url: url.to_string(),
            options: options.clone(),
            known: OnceLock::new(),
            head: Mutex::new(Vec::new()),
            blocks: Mutex::new(Vec::new()),
        }
    }

    /// The object's length, from the first request (made on first use): a
    /// GET of its first [`RemoteOptions::first_read`] bytes, kept.
    pub(crate) fn len(&self) -> io::Result<u64> {
        Ok(self.known()?.len)
    }

    fn known(&self) -> io::Result<&Known> {
        let known = self.known.get_or_init(|| {
            let range = 0..self.options.first_read.max(1);
            self.first(range.clone()).map_err(|e| (e.kind(), e.to_string()))
        });
        known.as_ref().map_err(|(kind, m)| io::Error::new(*kind, m.clone()))
    }

    /// The first request: the object's head, size and ETag.
    fn first(&self, range: Range<u64>) -> io::Result<Known> {
        let (known, bytes) = block_on(async {
            let deadline = Instant::now() + self.options.retry_timeout;
            let mut tries = 0;
            loop {
                self.options.stats.request();
                let attempt = async {
                    let options = GetOptions { range: Some(GetRange::Bounded(range.clone())), ..GetOptions::default() };
                    let got = self
                        .store
                        .get_opts(&self.location, options)
                        .await
                        .map_err(|e| from_store(e, &range, &self.options))?;
                    let (len, etag, served) = (got.meta.size, got.meta.e_tag.clone(), got.range.clone());
                    let want = range.start..range.end.min(len);
                    if served != want {
                        return Err(Failure::fatal(failed(
                            io::ErrorKind::InvalidData,
                            &want,
                            format!("the server sent bytes {}..{} instead", served.start, served.end),
                        )));
                    }
                    let mut bytes = vec![0u8; (want.end - want.start) as usize];
                    self.receive(got.into_stream(), &mut bytes, &want, etag.as_deref()).await?;
                    Ok((Known { len, etag }, bytes))
                };
                let failure = match tokio::time::timeout_at(deadline, attempt).await {
                    Ok(Ok(done)) => return Ok(done),
                    Ok(Err(failure)) => failure,
                    Err(_) => return Err(self.timed_out(&range)),
                };
                self.backoff(failure, &mut tries, deadline).await?;
            }
        })??;
        *self.head.lock().unwrap_or_else(PoisonError::into_inner) = bytes;
        Ok(known)
    }

    /// Waits before another attempt after `failure`, or gives up: when it
    /// is not transient, after `retries` retries, or when the wait would end
    /// past `deadline`.
    async fn backoff(&self, failure: Failure, tries: &mut u32, deadline: Instant) -> io::Result<()> {
        let wait = self.options.backoff.saturating_mul(1 << (*tries).min(6)).min(crate::options::MAX_BACKOFF);
        if !failure.transient || *tries >= self.options.retries || Instant::now() + wait >= deadline {
            return Err(failure.error);
        }
        self.options.stats.retry();
        tokio::time::sleep(wait).await;
        *tries += 1;
        Ok(())
    }

    /// The error of a request whose attempts took all of `retry_timeout`.
    fn timed_out(&self, range: &Range<u64>) -> io::Error {
        let o = &self.options;
        failed(
            io::ErrorKind::TimedOut,
            range,
            format!(
                "timed out: no complete answer within {:?} (retry_timeout; timeout {:?}, max_retries {})",
                o.retry_timeout, o.timeout, o.retries
            ),
        )
    }

    /// Copies a response body into `buf`, which must be filled exactly: a
    /// server sending more or fewer bytes than the range is an error.
    /// `etag`: the object's, with which object_store retries a failing body
    /// itself.
    async fn receive(
        &self,
        mut stream: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
        buf: &mut [u8],
        range: &Range<u64>,
        etag: Option<&str>,
    ) -> Result<(), Failure> {
        let mut at = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| from_store(e, range, &self.options).in_body(etag.is_some()))?;
            self.options.stats.received(chunk.len() as u64);
            let Some(dest) = buf.get_mut(at..at + chunk.len()) else {
                return Err(Failure::fatal(failed(
                    io::ErrorKind::InvalidData,
                    range,
                    "the server sent more bytes than asked for",
                )));
            };
            dest.copy_from_slice(&chunk);
            at += chunk.len();
        }
        if at != buf.len() {
            return Err(Failure {
                error: failed(io::ErrorKind::UnexpectedEof, range, format!("the body ended after {at} bytes")),
                transient: true,
            });
        }
        Ok(())
    }

    /// One ranged GET into `buf`, conditional on the first response's ETag.
    async fn get(&self, buf: &mut [u8], offset: u64, known: &Known) -> Result<(), Failure> {
        let range = offset..offset + buf.len() as u64;
        self.options.stats.request();
        let options = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            if_match: known.etag.clone(),
            ..GetOptions::default()
        };
        let got =
            self.store.get_opts(&self.location, options).await.map_err(|e| from_store(e, &range, &self.options))?;
        // Servers that ignore If-Match are caught here.
        if got.meta.e_tag.is_some() && got.meta.e_tag != known.etag || got.meta.size != known.len {
            return Err(Failure::fatal(failed(
                io::ErrorKind::Other,
                &range,
                "the object changed since it was opened (another ETag or size): reopen it",
            )));
        }
        if got.range != range {
            return Err(Failure::fatal(failed(
                io::ErrorKind::InvalidData,
                &range,
                format!("the server sent bytes {}..{} instead", got.range.start, got.range.end),
            )));
        }
        self.receive(got.into_stream(), buf, &range, known.etag.as_deref()).await
    }

    /// [`Object::get`], retried with backoff on transient failures, all of
    /// it within `retry_timeout`.
    async fn get_retried(&self, buf: &mut [u8], offset: u64, known: &Known) -> io::Result<()> {
        let deadline = Instant::now() + self.options.retry_timeout;
        let mut tries = 0;
        loop {
            let failure = match tokio::time::timeout_at(deadline, self.get(buf, offset, known)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(failure)) => failure,
                Err(_) => return Err(self.timed_out(&(offset..offset + buf.len() as u64))),
            };
            self.backoff(failure, &mut tries, deadline).await?;
        }
    }

    /// Fetches `buf.len()` bytes at `offset`: parts of `part_size`,
    /// `concurrency` at a time.
    fn fetch(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let known = self.known()?;
        let cache = self.options.cache.as_ref().zip(known.etag.as_deref());
        if let Some((cache, etag)) = cache {
            if cache.get(&self.url, etag, offset, buf) {
                self.options.stats.cache_hit();
                return Ok(());
            }
        }
        self.fetch_remote(buf, offset, known)?;
        if let Some((cache, etag)) = cache {
            cache.put(&self.url, etag, offset, buf);
        }
        Ok(())
    }

    /// [`Object::fetch`] from the store.
    fn fetch_remote(&self, buf: &mut [u8], offset: u64, known: &Known) -> io::Result<()> {
        let part = self.options.part_size.max(1) as usize;
        let jobs = buf
            .chunks_mut(part)
            .enumerate()
            .map(|(i, slice)| self.get_retried(slice, offset + (i * part) as u64, known));
        block_on(futures::stream::iter(jobs).buffer_unordered(self.options.concurrency.max(1)).try_collect::<()>())?
    }

    /// Fetches the ranges (offset, length) ahead of the reads that will ask
    /// for them, neighbours closer than `coalesce_gap` as one range.
    fn prefetch_ranges(&self, ranges: &mut [(u64, u64)]) -> io::Result<()> {
        let known = self.known()?;
        ranges.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for &(start, len) in ranges.iter().filter(|r| r.1 > 0) {
            let end = start.saturating_add(len).min(known.len);
            match merged.last_mut() {
                Some(last) if start <= last.1.saturating_add(self.options.coalesce_gap) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        for (start, end) in merged {
            let mut bytes = vec![0u8; (end - start) as usize];
            self.fetch(&mut bytes, start)?;
            let left = ranges.iter().filter(|r| r.0 >= start && r.0 < end).map(|r| r.1).sum();
            self.blocks.lock().unwrap_or_else(PoisonError::into_inner).push(Block { start, bytes, left });
        }
        Ok(())
    }

    /// Serves a read from a prefetched block, if one holds it all.
    fn take_prefetched(&self, buf: &mut [u8], offset: u64) -> bool {
        let mut blocks = self.blocks.lock().unwrap_or_else(PoisonError::into_inner);
        let len = buf.len() as u64;
        let Some(i) = blocks.iter().position(|b| offset >= b.start && offset + len <= b.start + b.bytes.len() as u64)
        else {
            return false;
        };
        let b = &mut blocks[i];
        let at = (offset - b.start) as usize;
        buf.copy_from_slice(&b.bytes[at..at + buf.len()]);
        b.left = b.left.saturating_sub(len);
        if b.left == 0 {
            blocks.swap_remove(i);
        }
        true
    }
}

impl ReadAt for Object {
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        let known = self.known()?;
        let range = offset..offset.saturating_add(buf.len() as u64);
        if range.end > known.len {
            return Err(failed(io::ErrorKind::UnexpectedEof, &range, format!("the object is {} bytes", known.len)));
        }
        let from_start = offset == 0;
        {
            let head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
            let cached = head.len() as u64;
            if offset < cached {
                let n = (cached - offset).min(buf.len() as u64) as usize;
                buf[..n].copy_from_slice(&head[offset as usize..offset as usize + n]);
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
        if buf.is_empty() || self.take_prefetched(buf, offset) {
            return Ok(());
        }
        self.fetch(buf, offset)?;
        if from_start {
            // The reader's head read: kept, as the signature and trust checks
            // read the head again.
            let mut head = self.head.lock().unwrap_or_else(PoisonError::into_inner);
            if head.len() as u64 == offset && offset + buf.len() as u64 <= HEAD_CACHE_MAX {
                head.extend_from_slice(buf);
            }
        }
        Ok(())
    }

    fn prefetch(&self, ranges: &mut [(u64, u64)]) -> io::Result<()> {
        self.prefetch_ranges(ranges)
    }

    fn stream_chunk(&self) -> Option<usize> {
        // Hashing a footer or tensor reads this much at a time: a few parts,
        // fetched in parallel.
        Some((self.options.part_size.saturating_mul(4)).min(64 << 20) as usize)
    }
}
