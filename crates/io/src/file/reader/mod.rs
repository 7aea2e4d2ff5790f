//! Opening files lazily and reading tensors: the [`Reader`] type here,
//! and one file per idea: `open` (the head and the trust checks), `read`
//! (mapped and positioned reads), `compressed` (decompression), `decrypt`
//! (encrypted and signed files), `verify` (digests and the footer) and
//! `region` (a slice of a tensor gathered as it is read).

mod committed;
mod compressed;
mod decrypt;
mod open;
mod read;
mod region;
mod report;
mod verify;

pub use region::{PlacedRead, Placement, RegionCheck, RegionRead};
pub use report::{FooterCheck, Mismatch, TagCheck, Verdict, VerifyReport};

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use deathtensors_format::{Format, Head, Header, TensorInfo};

use crate::error::{Error, ErrorKind, Result};
use crate::fs::mmap::Mmap;
use crate::fs::mount::{mount_of, Mount};
use crate::fs::pread::Source;
use crate::options::ReadOptions;
use crate::trust::access::Trust;

pub(crate) use self::open::read_head;
pub(crate) use self::read::read_parallel;

/// An open deathtensors, safetensors or bintensors file.
///
/// Opening reads and validates only the head of the file (prefix and
/// header): its cost depends on the header, not on the file size. Tensor
/// bytes are read when asked for: owned copies through positioned reads
/// ([`Reader::read`]), or borrowed from a mapping ([`Reader::bytes`], when
/// opened with [`Reader::open_mmap`]).
#[derive(Debug)]
pub struct Reader {
    path: PathBuf,
    /// The file, or another source of its bytes (a remote object).
    file: Source,
    file_len: u64,
    head: Head,
    /// Whether the caller of `open_mmap` allowed mapping (its safety
    /// contract), and the mapping, made on first zero-copy access.
    mappable: bool,
    map: OnceLock<std::result::Result<Mmap, String>>,
    /// The decompressed blob of a zstd file, made on first use.
    blob: OnceLock<std::result::Result<Vec<u8>, String>>,
    options: ReadOptions,
    /// Signatures, the tag table and the chunk cipher.
    trust: Trust,
    /// The kind of file system the file is on, asked on first need.
    mount: OnceLock<Mount>,
}

/// A tensor's description and where its bytes are in the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// The header's entry for the tensor.
    pub info: &'a TensorInfo,
    /// The file offset of its first byte (of the decompressed blob's start
    /// plus offset, for compressed files).
    pub file_offset: u64,
}

impl TensorRef<'_> {
    /// Whether the tensor's bytes sit at an address aligned for its dtype
    /// (in a mapping, which starts page-aligned). Files by deathtensors 0.3.0
    /// pack tensors with no padding: an F32 after a 3-byte BOOL is not
    /// aligned, and must be copied (or read unaligned) before use as `f32`s.
    pub fn is_aligned(&self) -> bool {
        self.file_offset.is_multiple_of(self.info.dtype.align())
    }
}

impl Reader {
    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated head: header, flags, and where the blob and footer are.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.head.header
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        self.head.header.format()
    }

    /// The length of the file in bytes when it was opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Whether the file has a SHA-256 footer.
    pub fn has_footer(&self) -> bool {
        self.head.footer().is_some()
    }

    /// Where [`Reader::read_data_into`] puts each tensor (header order) and
    /// how long its buffer is: the blob's own layout (`data_offsets`,
    /// [`Header::data_len`]), except for a file of compressed tensors, whose
    /// raw tensors are laid out as an uncompressed file would be (same order
    /// and alignment).
    pub fn data_layout(&self) -> (Vec<(u64, u64)>, u64) {
        let header = &self.head.header;
        if !self.head.is_chunk_compressed() {
            return (header.tensors().iter().map(|t| t.data_offsets).collect(), header.data_len());
        }
        let mut order: Vec<usize> = (0..header.len()).collect();
        order.sort_by_key(|&i| header.tensors()[i].data_offsets);
        let mut out = vec![(0, 0); header.len()];
        let mut at = 0u64;
        let align = header.alignment().max(1);
        for i in order {
            // Raw lengths of a valid header sum to at most its stored
            // blob's worth of chunks, far below u64::MAX.
            let start = at.div_ceil(align).saturating_mul(align);
            let end = start.saturating_add(header.tensors()[i].byte_len());
            out[i] = (start, end);
            at = end;
        }
        (out, at)
    }

    /// The global metadata, without the crypto fields of a cryptotensors
    /// file: they describe its encryption, not the model, and a copy that
    /// decrypts or re-encrypts it must not carry them over.
    pub fn model_metadata(&self) -> Option<deathtensors_format::Metadata> {
        let mut m = self.head.header.metadata().cloned();
        if let (Some(m), true) = (&mut m, self.is_cryptotensors()) {
            for k in deathtensors_format::CT_RESERVED {
                m.remove(*k);
            }
        }
        m
    }

    /// Whether the bytes come from a source other than a local file (a
    /// remote object): then every whole tensor read is checked against its
    /// digest, when it has one, before it is returned.
    pub fn is_remote(&self) -> bool {
        matches!(self.file, Source::Other(_))
    }

    /// The kind of file system the file is on (`Local` for other sources),
    /// asked once.
    pub fn mount(&self) -> Mount {
        *self.mount.get_or_init(|| self.file.file().map_or(Mount::Local, mount_of))
    }

    /// Whether whole tensors are best given as copy-on-write mappings of
    /// the file rather than read into memory the caller owns: only for a
    /// local, uncompressed, unencrypted file whose reads need no check, and
    /// then as [`ReadOptions::map_tensors`] says (by default, on a local
    /// file system; a network or user-space one is read in parallel).
    pub fn maps_tensors(&self) -> bool {
        if self.is_remote() || self.is_compressed() || self.is_encrypted() || self.checked_reads() {
            return false;
        }
        self.options.map_tensors.unwrap_or_else(|| self.mount() == Mount::Local)
    }

    /// The tensor of this name, in O(1).
    ///
    /// # Errors
    /// `TensorNotFound` if there is none.
    pub fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        self.check_not_hidden()?;
        let info =
            self.head.header.get(name).ok_or_else(|| {
                Error::new(ErrorKind::TensorNotFound(name.to_string()), Some(&self.path), "cannot read")
            })?;
        Ok(TensorRef { info, file_offset: self.head.data_start + info.data_offsets.0 })
    }
}
