//! A `torch.save` checkpoint seen as the safetensors file it converts to
//! (docs/PICKLE.md, "Reading like any file"): the header is made from the
//! pickle's tensor list, and each tensor's bytes come from its storage when
//! they are read, so that every reader of files (`inspect`, `ls`, `stats`,
//! `cat`, `diff`) takes a pickle checkpoint, lazily, with nothing of it run.
//!
//! The header is exactly the one [`convert_torch_checkpoint`] writes
//! (tied weights once, under the first name; plain values as metadata), so
//! what these commands show is what a conversion would hold. Leaves that
//! are neither tensors nor plain values are not shown (conversion refuses
//! them by default: `scan` and `convert` name them).
//!
//! [`convert_torch_checkpoint`]: crate::convert_torch_checkpoint

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use deathtensors_format::{Flags, Head, Header, Limits, TensorSpec};

use crate::error::{Error, Result};
use crate::options::ReadOptions;
use crate::pread::ReadAt;
use crate::reader::Reader;
use crate::torch_checkpoint::TorchCheckpoint;

const DOING: &str = "cannot read torch checkpoint";

/// The bytes of a [`TorchCheckpoint`] laid out as a safetensors file.
pub struct TorchSource {
    checkpoint: TorchCheckpoint,
    /// The 8-byte length and the JSON header.
    head: Vec<u8>,
    /// `(start, end, name)` of each tensor in the virtual file, by start.
    tensors: Vec<(u64, u64, String)>,
    /// The last tensor copied out of its storage (a strided view, a
    /// big-endian file), by index: a long read comes in many chunks.
    copied: Mutex<Option<(usize, Vec<u8>)>>,
}

impl std::fmt::Debug for TorchSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TorchSource").field("tensors", &self.tensors.len()).finish_non_exhaustive()
    }
}

impl TorchSource {
    /// Opens the checkpoint at `path` (as [`TorchCheckpoint::open`]) and
    /// lays out its safetensors header.
    ///
    /// # Errors
    /// As [`TorchCheckpoint::open`]; `InvalidInput` for a header that
    /// cannot be laid out (a name both a value and a tied weight's).
    pub fn open(path: &Path) -> Result<TorchSource> {
        let checkpoint = TorchCheckpoint::open(path)?;
        let tied = checkpoint.tied();
        let specs: Vec<TensorSpec> = checkpoint
            .tensors()
            .filter(|t| !tied.iter().any(|(removed, _)| removed == t.name))
            .map(|t| TensorSpec::new(t.name, t.dtype, t.shape.to_vec()))
            .collect();
        let mut metadata = deathtensors_format::Metadata::new();
        for (k, v) in checkpoint.metadata().iter().chain(&tied) {
            if metadata.insert(k.clone(), v.clone()).is_some() {
                return Err(Error::input(format!("{k:?} is both a value and a tied weight's name"), path, DOING));
            }
        }
        let metadata = (!metadata.is_empty()).then_some(metadata);
        let header = Header::new_safetensors(specs, metadata, &Limits::DEFAULT)
            .and_then(|h| Head::encode(&h, Flags::EMPTY).map(|head| (h, head)));
        let (header, head) = header.map_err(|e| Error::format(e, path, DOING))?;
        let start = head.len() as u64;
        let mut tensors: Vec<(u64, u64, String)> = header
            .tensors()
            .iter()
            .map(|t| (start + t.data_offsets.0, start + t.data_offsets.1, t.name.to_string()))
            .collect();
        tensors.sort_unstable_by_key(|t| t.0);
        Ok(TorchSource { checkpoint, head, tensors, copied: Mutex::new(None) })
    }

    /// The length of the virtual file.
    pub fn len(&self) -> u64 {
        self.tensors.last().map_or(self.head.len() as u64, |t| t.1.max(self.head.len() as u64))
    }

    /// Whether the virtual file is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The checkpoint underneath.
    pub fn checkpoint(&self) -> &TorchCheckpoint {
        &self.checkpoint
    }

    /// Copies `buf.len()` bytes of tensor `i`, from `at` into it.
    fn tensor_bytes(&self, i: usize, at: usize, buf: &mut [u8]) -> io::Result<()> {
        let name = &self.tensors[i].2;
        // The error itself travels, so that damage stays damage (exit 1).
        let to_io = |e: Error| io::Error::new(io::ErrorKind::InvalidData, e);
        let mut copied = self.copied.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((j, bytes)) = copied.as_ref() {
            if *j == i {
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                return Ok(());
            }
        }
        match self.checkpoint.read(name).map_err(to_io)? {
            Cow::Borrowed(bytes) => buf.copy_from_slice(&bytes[at..at + buf.len()]),
            Cow::Owned(bytes) => {
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                *copied = Some((i, bytes));
            }
        }
        Ok(())
    }
}

impl ReadAt for TorchSource {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= self.len());
        let Some(end) = end else {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the checkpoint"));
        };
        let mut pos = offset;
        while pos < end {
            let out = &mut buf[(pos - offset) as usize..];
            if pos < self.head.len() as u64 {
                let n = out.len().min(self.head.len() - pos as usize);
                out[..n].copy_from_slice(&self.head[pos as usize..pos as usize + n]);
                pos += n as u64;
                continue;
            }
            // The tensor holding `pos` (tensors are packed: no gaps).
            let i = self.tensors.partition_point(|t| t.1 <= pos);
            let Some(&(start, stop, _)) = self.tensors.get(i).filter(|t| t.0 <= pos) else {
                return Err(io::Error::other("a read between the checkpoint's tensors"));
            };
            let n = (stop.min(end) - pos) as usize;
            self.tensor_bytes(i, (pos - start) as usize, &mut out[..n])?;
            pos += n as u64;
        }
        Ok(())
    }
}

/// Opens the torch checkpoint at `path` as a [`Reader`] of the safetensors
/// file it converts to ([`TorchSource`]): its tensors listed from the
/// pickle, each read from its storage only when asked for.
///
/// # Errors
/// As [`TorchSource::open`] and [`Reader::open_source`].
pub fn open_torch_checkpoint(path: impl AsRef<Path>, options: ReadOptions) -> Result<Reader> {
    let path = path.as_ref();
    let source = TorchSource::open(path)?;
    let len = source.len();
    Reader::open_source(Box::new(source), len, path, options)
}
