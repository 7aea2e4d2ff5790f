//! Checking tensors against their digests as their bytes stream past.
//!
//! A conversion reads each tensor in chunks (several at once, on all cores,
//! when it compresses) and hands them to a writer. [`StreamCheck`] hashes
//! every tensor that has a digest as its chunks are read, in order, keeping
//! the few that arrive early until their turn; the read of a tensor's last
//! chunk fails when the whole does not match. A writer that fails a read
//! commits nothing, so no file is ever written from bytes that failed their
//! check, and no second pass over the input is needed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::error::{Error, ErrorKind, Result};
use crate::file::reader::Reader;
use crate::fs::hash::Hasher;

/// The digests of the tensors being streamed, checked chunk by chunk.
#[derive(Default)]
pub(crate) struct StreamCheck {
    streams: Mutex<HashMap<String, Stream>>,
}

/// One tensor's progress.
struct Stream {
    /// The bytes hashed so far (the offset of the next chunk to hash).
    next: u64,
    hasher: Hasher,
    /// Chunks read ahead of `next`, by offset.
    early: BTreeMap<u64, Vec<u8>>,
}

impl Stream {
    fn new() -> Stream {
        Stream { next: 0, hasher: Hasher::new(), early: BTreeMap::new() }
    }
}

impl StreamCheck {
    /// Takes `bytes`, just read from `offset` of tensor `name` of `reader`.
    /// Returns an error when they complete the tensor and it does not match
    /// its digest. Tensors without a digest, and those of encrypted files
    /// (whose digests are of the ciphertext, and whose chunks' tags were
    /// checked as they were decrypted), pass.
    ///
    /// A read from offset 0 of a tensor already hashed whole starts a new
    /// pass (writers that hash their input before writing it read twice).
    ///
    /// # Errors
    /// `TensorDigestMismatch`, naming the tensor and the file.
    pub(crate) fn take(&self, reader: &Reader, name: &str, offset: u64, bytes: &[u8]) -> Result<()> {
        if reader.is_encrypted() || bytes.is_empty() {
            return Ok(());
        }
        let Some(info) = reader.header().get(name) else { return Ok(()) };
        let Some(expected) = info.sha256.as_deref().copied() else { return Ok(()) };
        let len = reader.unpacked_tensor_len(name)?;
        let mut streams = self.streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let stream = streams.entry(name.to_string()).or_insert_with(Stream::new);
        if offset == 0 && stream.next == len {
            *stream = Stream::new();
        }
        if offset != stream.next {
            if offset > stream.next {
                stream.early.insert(offset, bytes.to_vec());
            }
            // A chunk read again before its pass completes: the first read
            // of it was hashed.
            return Ok(());
        }
        stream.hasher.update(bytes);
        stream.next += bytes.len() as u64;
        while let Some(chunk) = stream.early.remove(&stream.next) {
            stream.hasher.update(&chunk);
            stream.next += chunk.len() as u64;
        }
        if stream.next < len {
            return Ok(());
        }
        let actual = std::mem::replace(&mut stream.hasher, Hasher::new()).finish();
        if actual != expected {
            return Err(Error::new(
                ErrorKind::TensorDigestMismatch { tensor: name.to_string(), expected, actual },
                Some(reader.path()),
                "verification failed for",
            ));
        }
        Ok(())
    }
}
