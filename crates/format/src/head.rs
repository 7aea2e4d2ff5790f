//! The head of a file of either format: prefix, header, and where the data
//! blob and the footer are.

use alloc::vec::Vec;

use crate::header::{Format, Header};
use crate::layout::{align_up, check_blob};
use crate::prefix::{Flags, Prefix, MAGIC};
use crate::reader::Reader;
use crate::{Error, ErrorKind, Limits, Result};

/// safetensors refuses headers longer than this (its `MAX_HEADER_SIZE`), so
/// our safetensors encoder does too.
const SAFETENSORS_MAX_HEADER: u64 = 100_000_000;

/// Length of the SHA-256 footer.
pub const FOOTER_LEN: u64 = 32;

/// How many leading bytes [`Head::needed`] wants to see.
pub const PROBE_LEN: usize = Prefix::LEN;

/// The blob of a deathtensors file starts at a multiple of this many bytes
/// (deathtensors 0.3.0 pads with NUL bytes to it).
const LEGACY_DATA_ALIGN: u64 = 8;

/// Our deathtensors encoder starts the blob at a multiple of this (or of
/// the header's alignment, if larger): a cache line, so that with the
/// default alignment every tensor is 64-byte aligned in the file too.
const DATA_START_ALIGN: u64 = 64;

/// The parsed head of a file of either format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The validated header.
    pub header: Header,
    /// Prefix flags (always empty for safetensors).
    pub flags: Flags,
    /// File offset where the data blob starts.
    pub data_start: u64,
    /// File offset where the data blob ends (and the footer, if any, starts).
    pub data_end: u64,
}

/// Names what a file that is neither format looks like, from its first bytes.
pub(crate) fn sniff(bytes: &[u8]) -> Option<&'static str> {
    let trimmed = {
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
        &bytes[start..]
    };
    let lower_starts =
        |prefix: &[u8]| trimmed.len() >= prefix.len() && trimmed[..prefix.len()].eq_ignore_ascii_case(prefix);
    Some(match bytes {
        [] => "an empty file",
        _ if bytes.starts_with(b"version https://git-lfs") => {
            "a Git LFS pointer, not the file itself (fetch it with `git lfs pull`)"
        }
        _ if lower_starts(b"<!doctype html") || lower_starts(b"<html") || lower_starts(b"<head") => {
            "an HTML page (a download that returned a web page instead of the file)"
        }
        _ if lower_starts(b"<?xml") => "an XML document (perhaps an error page from a storage service)",
        [0x80, 2..=5, ..] => "a Python pickle (a PyTorch .bin or .pt file; unsafe to load from untrusted sources)",
        [b'P', b'K', 3, 4, ..] => "a zip archive (PyTorch .pt and .pth files are zip archives of pickles)",
        [0x1f, 0x8b, ..] => "a gzip file",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "a zstd frame",
        [b'G', b'G', b'U', b'F', ..] => "a GGUF file",
        [0x89, b'H', b'D', b'F', ..] => "an HDF5 file",
        [0x93, b'N', b'U', b'M', b'P', b'Y', ..] => "a numpy .npy file",
        [b'{', ..] | [b'[', ..] => "a JSON document (a sharded checkpoint's index, or a config file?)",
        // Read as a safetensors header length, 8 printable bytes are over
        // 6 * 10^17: no real file. A damaged magic or a text file, then.
        _ if bytes.get(..8).is_some_and(is_text) => "text (a text file, or a file whose magic number was damaged?)",
        _ => return None,
    })
}

/// Whether every byte is printable ASCII or the whitespace text files hold.
fn is_text(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| matches!(b, b'\t' | b'\n' | b'\r' | 0x20..=0x7e))
}

impl Head {
    /// How many bytes from the start of the file [`Head::parse`] needs,
    /// given at least its first [`PROBE_LEN`] bytes (or the whole file if
    /// shorter).
    ///
    /// # Errors
    /// - `UnrecognizedFormat` if the bytes are neither format, naming what
    ///   they look like when that is recognisable.
    /// - `Truncated` if the bytes end inside the prefix.
    /// - `LimitExceeded` if the header is longer than `limits.max_header_len`.
    /// - `UnsupportedVersion`, `UnknownFlags` as in [`Prefix::parse`].
    pub fn needed(start: &[u8], limits: &Limits) -> Result<u64> {
        if start.starts_with(&MAGIC) {
            let prefix = Prefix::parse(start)?;
            check_header_len(prefix.header_len, limits, 16)?;
            let end = (Prefix::LEN as u64) + prefix.header_len;
            return align_up(end, LEGACY_DATA_ALIGN, "data start");
        }
        // A safetensors file: a length within the limit, then a JSON object.
        // Checked before sniffing, because some lengths look like other
        // formats' magic numbers (640 starts with a pickle's 0x80 0x02).
        let len_field = start.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok());
        if let Some(n) = len_field.map(u64::from_le_bytes) {
            if start.get(8) == Some(&b'{') && n <= limits.max_header_len {
                return Ok(8 + n);
            }
        }
        if let Some(what) = sniff(start) {
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: Some(what) }));
        }
        let n = Reader::new(start).u64_le("safetensors header length")?;
        check_header_len(n, limits, 0)?;
        if start.len() > 8 {
            // Not a JSON object after the length: neither format.
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: None }));
        }
        Ok(8 + n)
    }

    /// Parses the head of a file of either format, detected by content.
    ///
    /// `bytes` holds the start of the file, at least [`Head::needed`] bytes
    /// of it (a mapping of the whole file is fine); `file_len` is the length
    /// of the whole file.
    ///
    /// # Errors
    /// Everything [`Head::needed`] and [`Header::parse`] report, and:
    /// - `Truncated` if the header, padding or footer runs past `file_len`
    ///   or past `bytes`.
    /// - `NonZeroPadding` if deathtensors' padding bytes are not zero.
    /// - `Unsupported` for an encrypted file.
    /// - `UnownedBytes` if the data blob is longer than the tensors need,
    ///   `OffsetOutOfBounds` if shorter (uncompressed files only: the size of
    ///   a compressed blob is checked when it is decompressed).
    pub fn parse(bytes: &[u8], file_len: u64, limits: &Limits) -> Result<Head> {
        let probe = bytes.get(..PROBE_LEN.min(bytes.len())).unwrap_or(bytes);
        let needed = Head::needed(probe, limits)?;
        if needed > file_len {
            return Err(Error::truncated("header", needed, file_len));
        }
        if needed > bytes.len() as u64 {
            return Err(Error::truncated("header", needed, bytes.len() as u64));
        }
        // `needed` <= bytes.len(), so it fits in usize.
        let head = &bytes[..needed as usize];
        if bytes.starts_with(&MAGIC) {
            Head::parse_deathtensors(head, file_len, limits)
        } else {
            Head::parse_safetensors(head, file_len, limits)
        }
    }

    fn parse_deathtensors(head: &[u8], file_len: u64, limits: &Limits) -> Result<Head> {
        let prefix = Prefix::parse(head)?;
        if prefix.flags.contains(Flags::ENCRYPTED) {
            return Err(Error::new(ErrorKind::Unsupported { what: "encryption (flag bit 2)" }));
        }
        let json_end = Prefix::LEN + prefix.header_len as usize;
        let json = &head[Prefix::LEN..json_end];
        if let Some(i) = head[json_end..].iter().position(|&b| b != 0) {
            return Err(Error::at(ErrorKind::NonZeroPadding, (json_end + i) as u64));
        }
        let data_start = head.len() as u64;
        let footer = if prefix.flags.contains(Flags::CHECKSUM) { FOOTER_LEN } else { 0 };
        let min_len = data_start + footer;
        if file_len < min_len {
            return Err(Error::truncated("sha256 footer", min_len, file_len));
        }
        let data_end = file_len - footer;
        let header = Header::parse_deathtensors(json, limits).map_err(|e| shift(e, Prefix::LEN as u64))?;
        if !prefix.flags.contains(Flags::ZSTD) {
            check_blob(header.tensors(), header.data_len(), data_end - data_start)?;
        }
        Ok(Head { header, flags: prefix.flags, data_start, data_end })
    }

    fn parse_safetensors(head: &[u8], file_len: u64, limits: &Limits) -> Result<Head> {
        let json = &head[8..];
        if json.first() != Some(&b'{') {
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: None }));
        }
        let header = Header::parse_safetensors(json, limits).map_err(|e| shift(e, 8))?;
        let data_start = head.len() as u64;
        check_blob(header.tensors(), header.data_len(), file_len - data_start)?;
        Ok(Head { header, flags: Flags::EMPTY, data_start, data_end: file_len })
    }

    /// Encodes the head of a file for `header`: the prefix or length, the
    /// JSON header and its padding. The data blob follows it directly, at a
    /// file offset that is a multiple of 8 (safetensors) or of 64 and of the
    /// header's alignment (deathtensors). Same header, same bytes.
    ///
    /// # Errors
    /// - `Unsupported` if `flags` are given for a safetensors header, or
    ///   `ENCRYPTED` for a deathtensors one.
    /// - `LimitExceeded` if the JSON is longer than the default header limit,
    ///   which readers would refuse.
    pub fn encode(header: &Header, flags: Flags) -> Result<Vec<u8>> {
        let json = crate::enc::json(header);
        match header.format() {
            Format::Deathtensors => {
                if flags.contains(Flags::ENCRYPTED) {
                    return Err(Error::new(ErrorKind::Unsupported { what: "encryption (flag bit 2)" }));
                }
                let align = DATA_START_ALIGN.max(header.alignment());
                let unpadded = Prefix::LEN as u64 + json.len() as u64;
                let total = align_up(unpadded, align, "data start")?;
                let header_len = total - Prefix::LEN as u64;
                check_header_len(header_len, &Limits::DEFAULT, 16)?;
                let mut out = Vec::with_capacity(total as usize);
                out.extend_from_slice(&Prefix { version: 1, flags, header_len }.encode());
                out.extend_from_slice(&json);
                out.resize(total as usize, b' ');
                Ok(out)
            }
            Format::Safetensors => {
                if flags != Flags::EMPTY {
                    return Err(Error::new(ErrorKind::Unsupported { what: "flags in a safetensors file" }));
                }
                let n = align_up(json.len() as u64, 8, "header length")?;
                if n > SAFETENSORS_MAX_HEADER {
                    return Err(Error::limit("header length", n, SAFETENSORS_MAX_HEADER));
                }
                let mut out = Vec::with_capacity(8 + n as usize);
                out.extend_from_slice(&n.to_le_bytes());
                out.extend_from_slice(&json);
                out.resize(8 + n as usize, b' ');
                Ok(out)
            }
        }
    }

    /// The byte range of the SHA-256 footer, if the file has one.
    pub fn footer(&self) -> Option<(u64, u64)> {
        self.flags.contains(Flags::CHECKSUM).then_some((self.data_end, self.data_end + FOOTER_LEN))
    }

    /// The byte range the footer's digest covers: from the end of the
    /// prefix (byte 24) to the end of the data blob, as stored.
    pub fn checksummed(&self) -> Option<(u64, u64)> {
        self.footer().map(|_| (Prefix::LEN as u64, self.data_end))
    }

    /// Whether the data blob is one zstd frame.
    pub fn is_compressed(&self) -> bool {
        self.flags.contains(Flags::ZSTD)
    }
}

fn check_header_len(len: u64, limits: &Limits, at: u64) -> Result<()> {
    if len > limits.max_header_len {
        let e = Error::limit("header length", len, limits.max_header_len);
        return Err(Error::at(e.kind().clone(), at));
    }
    Ok(())
}

/// Turns an offset within the JSON header into a file offset.
fn shift(e: Error, by: u64) -> Error {
    e.shifted(by)
}
