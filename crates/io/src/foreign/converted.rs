//! A file of another kind (a `torch.save` checkpoint, a numpy `.npy` or
//! `.npz`) seen as the safetensors file it converts to (docs/PICKLE.md,
//! "Reading like any file"): the header is made from the container's
//! tensor list, and each tensor's bytes come from the container when they
//! are read, so that every reader of files (`inspect`, `ls`, `stats`,
//! `cat`, `diff`) takes one, lazily, with nothing of it run.
//!
//! The header is exactly the one the conversion writes (for a torch
//! checkpoint, tied weights once under the first name and plain values as
//! metadata), so what these commands show is what a conversion would hold.
//! Leaves that are neither tensors nor plain values are not shown
//! (conversion refuses them by default: `scan` and `convert` name them).

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use deathtensors_format::{Dtype, Flags, Head, Header, Limits, Metadata, TensorSpec};

use crate::error::{Error, Result};
use crate::file::reader::Reader;
use crate::file::writer::save;
use crate::fs::pread::ReadAt;
use crate::options::{ReadOptions, WriteOptions};

/// A container of tensors that converts to a safetensors file.
pub trait Container: Send + Sync {
    /// The tensors the conversion writes, in the container's order.
    fn specs(&self) -> Vec<TensorSpec>;
    /// The conversion's metadata.
    ///
    /// # Errors
    /// `InvalidInput` for metadata the conversion would refuse.
    fn conversion_metadata(&self) -> Result<Metadata>;
    /// The bytes of tensor `name`, contiguous and little-endian.
    ///
    /// # Errors
    /// `TensorNotFound`; damage found reading it.
    fn tensor(&self, name: &str) -> Result<Cow<'_, [u8]>>;
    /// What failures say the reader was doing ("cannot read torch checkpoint").
    fn doing(&self) -> &'static str;
}

/// The bytes of a [`Container`] laid out as a safetensors file.
pub struct ConvertedSource<C> {
    container: C,
    /// The 8-byte length and the JSON header.
    head: Vec<u8>,
    /// `(start, end, name)` of each tensor in the virtual file, by start.
    tensors: Vec<(u64, u64, String)>,
    /// The last tensor copied out of its storage (a strided view, a
    /// big-endian file), by index: a long read comes in many chunks.
    copied: Mutex<Option<(usize, Vec<u8>)>>,
}

impl<C> std::fmt::Debug for ConvertedSource<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConvertedSource").field("tensors", &self.tensors.len()).finish_non_exhaustive()
    }
}

impl<C: Container> ConvertedSource<C> {
    /// Lays out the safetensors header of `container`, read from `path`.
    ///
    /// # Errors
    /// `InvalidInput` for a header that cannot be laid out (a name both a
    /// value and a tied weight's, a header past safetensors' limit).
    pub fn new(container: C, path: &Path) -> Result<ConvertedSource<C>> {
        let metadata = container.conversion_metadata()?;
        let metadata = (!metadata.is_empty()).then_some(metadata);
        let header = Header::new_safetensors(container.specs(), metadata, &Limits::DEFAULT)
            .and_then(|h| Head::encode(&h, Flags::EMPTY).map(|head| (h, head)));
        let (header, head) = header.map_err(|e| Error::format(e, path, container.doing()))?;
        let start = head.len() as u64;
        let mut tensors: Vec<(u64, u64, String)> = header
            .tensors()
            .iter()
            .map(|t| (start + t.data_offsets.0, start + t.data_offsets.1, t.name.to_string()))
            .collect();
        tensors.sort_unstable_by_key(|t| t.0);
        Ok(ConvertedSource { container, head, tensors, copied: Mutex::new(None) })
    }

    /// The length of the virtual file.
    pub fn len(&self) -> u64 {
        self.tensors.last().map_or(self.head.len() as u64, |t| t.1.max(self.head.len() as u64))
    }

    /// Whether the virtual file is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The container underneath.
    pub fn container(&self) -> &C {
        &self.container
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
        match self.container.tensor(name).map_err(to_io)? {
            Cow::Borrowed(bytes) => buf.copy_from_slice(&bytes[at..at + buf.len()]),
            Cow::Owned(bytes) => {
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                *copied = Some((i, bytes));
            }
        }
        Ok(())
    }
}

impl<C: Container> ReadAt for ConvertedSource<C> {
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

/// Opens `container`, read from `path`, as a [`Reader`] of the safetensors
/// file it converts to ([`ConvertedSource`]): its tensors listed, each
/// read from the container only when asked for.
///
/// # Errors
/// As [`ConvertedSource::new`] and [`Reader::open_source`].
pub fn open_converted<C: Container + 'static>(container: C, path: &Path, options: ReadOptions) -> Result<Reader> {
    let source = ConvertedSource::new(container, path)?;
    let len = source.len();
    Reader::open_source(Box::new(source), len, path, options)
}

/// Writes `container`'s conversion to `output` as `options` say
/// (safetensors or deathtensors): its tensors, and its metadata merged
/// into the options' own (a key in both is refused).
///
/// # Errors
/// As [`Container::tensor`], and the writer's; `InvalidInput` for a key
/// both in the options' metadata and the container's.
pub fn convert(container: &dyn Container, input: &Path, output: &Path, options: &WriteOptions) -> Result<Header> {
    let mut data = Vec::new();
    for spec in container.specs() {
        let bytes = container.tensor(&spec.name)?;
        data.push((spec, bytes));
    }
    let mut options = options.clone();
    let extra = container.conversion_metadata()?;
    if !extra.is_empty() {
        let mut meta = options.metadata.take().unwrap_or_default();
        for (k, v) in extra {
            if meta.contains_key(&k) {
                return Err(Error::input(format!("{k:?} is both given and the input's"), input, container.doing()));
            }
            meta.insert(k, v);
        }
        options.metadata = Some(meta);
    }
    let tensors = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    save(output, tensors, &options)
}

/// Big-endian elements swapped to little-endian (complex numbers part by
/// part).
pub(crate) fn swapped(mut bytes: Vec<u8>, dtype: Dtype) -> Vec<u8> {
    let w = dtype.names().byte_width().unwrap_or(1) as usize;
    let part = if matches!(dtype, Dtype::C64 | Dtype::C128) { w / 2 } else { w };
    if part > 1 {
        for chunk in bytes.chunks_exact_mut(part) {
            chunk.reverse();
        }
    }
    bytes
}
