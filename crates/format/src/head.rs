//! The head of a file of any of the three formats: prefix, header, and
//! where the data blob and the footer are.

use alloc::vec::Vec;

use crate::crypt::TableLayout;
use crate::header::Header;
use crate::layout::{align_up, check_blob};
use crate::prefix::{Flags, Prefix, MAGIC};
use crate::reader::Reader;
use crate::sniff::sniff;
use crate::tensor::Format;
use crate::{Error, ErrorKind, Limits, Result, SAFETENSORS_MAX_HEADER};

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

/// The parsed head of a file of any of the three formats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The validated header.
    pub header: Header,
    /// Prefix flags (always empty for safetensors and bintensors).
    pub flags: Flags,
    /// File offset where the data blob starts.
    pub data_start: u64,
    /// File offset where the data blob ends (and the footer, if any, starts).
    pub data_end: u64,
    /// File offset where the header ends (`24 + L`, or `8 + n` for
    /// safetensors and bintensors): a signature signs `file[0 .. header_end]`.
    pub header_end: u64,
    /// Where the tag table and header MAC are, for an encrypted file.
    pub tables: Option<TableLayout>,
    /// For a sealed file: the file range of the sealed header (ciphertext
    /// and tag). Until [`Head::unseal`], `header` is the outer header, with
    /// no tensor.
    pub sealed: Option<(u64, u64)>,
}

impl Head {
    /// What a file starting with `start` is, for people: "a deathtensors
    /// file", "a safetensors file", "a bintensors file", or what it looks
    /// like instead ("a Python pickle ...", "an HTML page ..."), decided
    /// as [`Head::needed`] decides which parser a file gets. Give at least
    /// the first 16 bytes.
    pub fn describe(start: &[u8]) -> &'static str {
        if start.starts_with(&MAGIC) {
            return "a deathtensors file";
        }
        match Head::needed(start, &Limits::DEFAULT) {
            Ok(_) if start.get(8) == Some(&b'{') => "a safetensors file",
            Ok(_) if start.len() > 8 => "a bintensors file",
            Err(e) => match e.kind() {
                ErrorKind::UnrecognizedFormat { looks_like: Some(what) } => what,
                _ => "a file of no format deathtensors reads",
            },
            Ok(_) => "a file too short to tell",
        }
    }

    /// How many bytes from the start of the file [`Head::parse`] needs,
    /// given at least its first [`PROBE_LEN`] bytes (or the whole file if
    /// shorter).
    ///
    /// # Errors
    /// - `UnrecognizedFormat` if the bytes are none of the formats, naming what
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
        // A safetensors file: a length within the limit, then a JSON object;
        // a bintensors file: a length within the same limit, then its
        // metadata option tag, 0x00 or 0x01. Checked before sniffing,
        // because some lengths look like other formats' magic numbers (640
        // starts with a pickle's 0x80 0x02).
        let len_field = start.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok());
        let cap = crate::limits::safetensors_limits(limits);
        if let Some(n) = len_field.map(u64::from_le_bytes) {
            if start.get(8) == Some(&b'{') && n <= cap.max_header_len {
                return Ok(8 + n);
            }
            // bintensors: its writer makes `n` a multiple of 8. Another
            // length is refused as bintensors' unless the bytes look like
            // something else (a gzip file with no timestamp reads as a
            // length of 559,903 and a 0x00 tag).
            if matches!(start.get(8), Some(0 | 1)) && n <= cap.max_header_len && (n % 8 == 0 || sniff(start).is_none())
            {
                return Ok(8 + n);
            }
        }
        if let Some(what) = sniff(start) {
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: Some(what) }));
        }
        let n = Reader::new(start).u64_le("safetensors header length")?;
        check_header_len(n, &cap, 0)?;
        if start.len() > 8 {
            // Neither a JSON object nor an option tag after the length.
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: None }));
        }
        Ok(8 + n)
    }

    /// Parses the head of a file of any of the three formats, detected by content.
    ///
    /// `bytes` holds the start of the file, at least [`Head::needed`] bytes
    /// of it (a mapping of the whole file is fine); `file_len` is the length
    /// of the whole file.
    ///
    /// # Errors
    /// Everything [`Head::needed`] and [`Header::parse`] report, and:
    /// - `Truncated` if the header, padding or footer runs past `file_len`
    ///   or past `bytes`.
    /// - `NonZeroPadding` if deathtensors' padding bytes are not zero (the
    ///   padding after an encrypted file's tag table is the reader's to check:
    ///   it is not in `bytes`).
    /// - `Unsupported` for zstd with encryption, an `encryption` section
    ///   without flag bit 2, or a signed file with a plaintext tensor that has
    ///   no digest; `MissingField` for flag bit 2 without the section.
    ///
    /// For a signed file (flag bit 3), `file_len` must exclude the signature
    /// block (see [`crate::signature_block_len`]).
    /// - `UnownedBytes` if the data blob is longer than the tensors need,
    ///   `OffsetOutOfBounds` if shorter (uncompressed files only: the size of
    ///   a compressed blob is checked when it is decompressed).
    pub fn parse(bytes: &[u8], file_len: u64, limits: &Limits) -> Result<Head> {
        Head::parse_with(bytes, file_len, limits, &crate::Serial)
    }

    /// [`Head::parse`], lending the decoder a second thread through `fork`:
    /// the tensor entries of a large header (256 KiB or more) are decoded in
    /// two halves at the same time. Same result, same errors.
    ///
    /// # Errors
    /// As [`Head::parse`].
    pub fn parse_with(bytes: &[u8], file_len: u64, limits: &Limits, fork: &dyn crate::Fork) -> Result<Head> {
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
            Head::parse_deathtensors(head, file_len, limits, fork)
        } else if is_bintensors(head) {
            Head::parse_bintensors(head, file_len, limits)
        } else {
            Head::parse_safetensors(head, file_len, limits, fork)
        }
    }

    fn parse_deathtensors(head: &[u8], file_len: u64, limits: &Limits, fork: &dyn crate::Fork) -> Result<Head> {
        let prefix = Prefix::parse(head)?;
        let flags = prefix.flags;
        if flags.contains(Flags::ENCRYPTED) && flags.contains(Flags::ZSTD) {
            return Err(Error::at(ErrorKind::Unsupported { what: "zstd with encryption" }, 12));
        }
        check_compression_flags(flags).map_err(|e| Error::at(e.kind().clone(), 12))?;
        if flags.contains(Flags::SEALED) && !flags.contains(Flags::ENCRYPTED) {
            return Err(Error::at(
                ErrorKind::Unsupported { what: "a sealed header without encryption (flag bit 2)" },
                12,
            ));
        }
        let json_end = Prefix::LEN + prefix.header_len as usize;
        let json = &head[Prefix::LEN..json_end];
        if let Some(i) = head[json_end..].iter().position(|&b| b != 0) {
            return Err(Error::at(ErrorKind::NonZeroPadding, (json_end + i) as u64));
        }
        let header =
            Header::parse_forked(json, Format::Deathtensors, limits, fork).map_err(|e| shift(e, Prefix::LEN as u64))?;
        match (flags.contains(Flags::COMPRESSED), header.compression().is_some()) {
            (true, false) => return Err(Error::new(ErrorKind::MissingField { field: "compression" })),
            (false, true) => {
                return Err(Error::new(ErrorKind::Unsupported { what: "a compression section without flag bit 5" }))
            }
            _ => {}
        }
        let sealed_len = header.encryption().and_then(|e| e.sealed_header);
        let sealed = match (flags.contains(Flags::SEALED), sealed_len) {
            (true, Some(n)) => {
                let outer_ok = header.is_empty()
                    && header.metadata().is_none_or(|m| m.is_empty())
                    && header.created_by().is_none();
                if !outer_ok {
                    return Err(Error::new(ErrorKind::InvalidEncryption {
                        what: "outer header of a sealed file (it must list no tensor, metadata or created_by)",
                    }));
                }
                let start = head.len() as u64;
                let end = start
                    .checked_add(n)
                    .and_then(|e| e.checked_add(crate::crypt::TAG_LEN as u64))
                    .ok_or_else(|| Error::overflow("sealed header end"))?;
                Some((start, end))
            }
            (true, None) => return Err(Error::new(ErrorKind::MissingField { field: "sealed_header" })),
            (false, Some(_)) => {
                return Err(Error::new(ErrorKind::Unsupported { what: "a sealed_header field without flag bit 4" }))
            }
            (false, None) => None,
        };
        let table_start = sealed.map_or(head.len() as u64, |(_, end)| end);
        let tables = match (flags.contains(Flags::ENCRYPTED), header.encryption()) {
            (true, Some(e)) => Some(TableLayout::new(table_start, e.tag_table_len, header.alignment())?),
            (true, None) => return Err(Error::new(ErrorKind::MissingField { field: "encryption" })),
            (false, Some(_)) => {
                return Err(Error::new(ErrorKind::Unsupported { what: "an encryption section without flag bit 2" }))
            }
            (false, None) => None,
        };
        if flags.contains(Flags::SIGNED) && sealed.is_none() && !header.has_tensor_digests() {
            return Err(Error::new(ErrorKind::Unsupported {
                what: "a signed file with a tensor that has no sha256 digest",
            }));
        }
        let data_start = tables.map_or(head.len() as u64, |t| t.data_start);
        let footer = if flags.contains(Flags::CHECKSUM) { FOOTER_LEN } else { 0 };
        let min_len = data_start.checked_add(footer).ok_or_else(|| Error::overflow("file length"))?;
        if file_len < min_len {
            let what = if tables.is_some() { "tag table" } else { "sha256 footer" };
            return Err(Error::truncated(what, min_len, file_len));
        }
        let data_end = file_len - footer;
        // A sealed file's blob is checked against its inner header (`unseal`).
        if !flags.contains(Flags::ZSTD) && sealed.is_none() {
            check_blob(header.tensors(), header.data_len(), data_end - data_start, data_start + footer)?;
        }
        let header_end = sealed.map_or(json_end as u64, |(_, end)| end);
        Ok(Head { header, flags, data_start, data_end, header_end, tables, sealed })
    }

    /// The head of a sealed file with its inner header, decrypted by the
    /// caller from [`Head::sealed`]: the head as if the file were not
    /// sealed (its tensors, and the outer `encryption` section).
    ///
    /// # Errors
    /// - `Unsupported` if the file is not sealed.
    /// - Every error of [`Header::parse_deathtensors`] for the inner header,
    ///   which must not have an `encryption` section of its own
    ///   (`InvalidEncryption`) and must have the outer `alignment`.
    /// - `InvalidEncryption` if the tag table does not match its tensors;
    ///   `UnownedBytes` or `OffsetOutOfBounds` if the blob does not.
    pub fn unseal(&self, inner_json: &[u8], limits: &Limits) -> Result<Head> {
        let Some(enc) = self.header.encryption().filter(|_| self.sealed.is_some()) else {
            return Err(Error::new(ErrorKind::Unsupported { what: "unsealing a file that is not sealed" }));
        };
        let inner = Header::parse_deathtensors(inner_json, limits)?;
        if inner.encryption().is_some() || inner.alignment() != self.header.alignment() {
            return Err(Error::new(ErrorKind::InvalidEncryption { what: "inner header of a sealed file" }));
        }
        let header = inner.with_encryption_within(enc.clone(), limits)?;
        if header.encryption().and_then(|e| e.sealed_header) != Some(inner_json.len() as u64) {
            return Err(Error::new(ErrorKind::InvalidEncryption { what: "sealed_header.length" }));
        }
        let footer = self.footer().map_or(0, |_| FOOTER_LEN);
        check_blob(header.tensors(), header.data_len(), self.data_end - self.data_start, self.data_start + footer)?;
        if self.flags.contains(Flags::SIGNED) && !header.has_tensor_digests() {
            return Err(Error::new(ErrorKind::Unsupported {
                what: "a signed file with a tensor that has no sha256 digest",
            }));
        }
        Ok(Head { header, ..self.clone() })
    }

    /// Encodes a sealed file's head: the prefix and outer header (as
    /// [`Head::encode`] encodes heads), then the inner header's JSON, to be
    /// encrypted into the sealed header that follows. `header` is the full
    /// header, whose `encryption` section has `sealed_header` set to the
    /// inner JSON's length.
    ///
    /// # Errors
    /// As [`Head::encode`]; `Unsupported` if `flags` lack `SEALED` or
    /// `ENCRYPTED`, or `sealed_header` is not the inner JSON's length.
    pub fn encode_sealed(header: &Header, flags: Flags) -> Result<(Vec<u8>, Vec<u8>)> {
        if !(flags.contains(Flags::SEALED) && flags.contains(Flags::ENCRYPTED)) {
            return Err(Error::new(ErrorKind::Unsupported { what: "a sealed head without flag bits 2 and 4" }));
        }
        let inner = crate::enc::json(&header.without_encryption());
        if header.encryption().and_then(|e| e.sealed_header) != Some(inner.len() as u64) {
            return Err(Error::new(ErrorKind::Unsupported {
                what: "a sealed_header length other than the inner header's",
            }));
        }
        if flags.contains(Flags::SIGNED) && !header.has_tensor_digests() {
            return Err(Error::new(ErrorKind::Unsupported {
                what: "a signed file with a tensor that has no sha256 digest",
            }));
        }
        let outer = Head::encode(&header.sealed_outer(), flags)?;
        Ok((outer, inner))
    }

    /// The inner JSON length [`Head::encode_sealed`] gives for `header`.
    pub fn sealed_json_len(header: &Header) -> usize {
        crate::enc::json(&header.without_encryption()).len()
    }

    fn parse_bintensors(head: &[u8], file_len: u64, limits: &Limits) -> Result<Head> {
        let header = Header::parse_bintensors(&head[8..], limits).map_err(|e| shift(e, 8))?;
        Head::after_length(head, header, file_len)
    }

    /// The head of a file whose header follows an 8-byte length and whose
    /// data follows the header up to the end of the file (safetensors,
    /// bintensors): no flags, no tables.
    fn after_length(head: &[u8], header: Header, file_len: u64) -> Result<Head> {
        let data_start = head.len() as u64;
        check_blob(header.tensors(), header.data_len(), file_len - data_start, data_start)?;
        Ok(Head {
            header,
            flags: Flags::EMPTY,
            data_start,
            data_end: file_len,
            header_end: data_start,
            tables: None,
            sealed: None,
        })
    }

    fn parse_safetensors(head: &[u8], file_len: u64, limits: &Limits, fork: &dyn crate::Fork) -> Result<Head> {
        let json = &head[8..];
        if json.first() != Some(&b'{') {
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: None }));
        }
        let header = Header::parse_forked(json, Format::Safetensors, limits, fork).map_err(|e| shift(e, 8))?;
        Head::after_length(head, header, file_len)
    }

    /// Encodes the head of a file for `header`: the prefix or length, the
    /// header (JSON, or bintensors' binary header) and its padding. The data
    /// blob follows it directly, at a file offset that is a multiple of 8
    /// (safetensors, bintensors) or of 64 and of the header's alignment
    /// (deathtensors). Same header, same bytes: for bintensors, the bytes
    /// bintensors 0.2 writes.
    ///
    /// # Errors
    /// - `LimitExceeded` for a bintensors header that bintensors' reader
    ///   would refuse (longer than 100,000,000 bytes, or past bincode's
    ///   decode budget).
    /// - `Unsupported` if `flags` are given for a safetensors or bintensors header, or if
    ///   `ENCRYPTED` is set for a header without an `encryption` section (or
    ///   the reverse), or with `ZSTD`, or if `SIGNED` is set and a tensor has
    ///   no `sha256` digest.
    ///
    /// For an encrypted header the result ends where the tag table starts
    /// ([`Head::tables_for`] tells where the blob starts).
    /// - `LimitExceeded` if the JSON is longer than the default header limit,
    ///   which readers would refuse.
    pub fn encode(header: &Header, flags: Flags) -> Result<Vec<u8>> {
        match header.format() {
            Format::Deathtensors => {
                if flags.contains(Flags::ENCRYPTED) != header.encryption().is_some() {
                    return Err(Error::new(ErrorKind::Unsupported {
                        what: "flag bit 2 without an encryption section, or the reverse",
                    }));
                }
                if flags.contains(Flags::ENCRYPTED) && flags.contains(Flags::ZSTD) {
                    return Err(Error::new(ErrorKind::Unsupported { what: "zstd with encryption" }));
                }
                check_compression_flags(flags)?;
                if flags.contains(Flags::COMPRESSED) != header.compression().is_some() {
                    return Err(Error::new(ErrorKind::Unsupported {
                        what: "flag bit 5 without a compression section, or the reverse",
                    }));
                }
                // What the parser refuses, the encoder does not write.
                if flags.contains(Flags::SIGNED) && !flags.contains(Flags::SEALED) && !header.has_tensor_digests() {
                    return Err(Error::new(ErrorKind::Unsupported {
                        what: "a signed file with a tensor that has no sha256 digest",
                    }));
                }
                // The prefix and JSON in one buffer: a 10-million-tensor
                // header is a gigabyte, which is not copied.
                let mut out = crate::enc::json_after(header, Prefix::LEN);
                let align = DATA_START_ALIGN.max(header.alignment());
                let total = align_up(out.len() as u64, align, "data start")?;
                let header_len = total - Prefix::LEN as u64;
                check_header_len(header_len, &Limits::DEFAULT, 16)?;
                out[..Prefix::LEN].copy_from_slice(&Prefix { version: 1, flags, header_len }.encode());
                out.resize(total as usize, b' ');
                Ok(out)
            }
            Format::Safetensors => {
                if flags != Flags::EMPTY {
                    return Err(Error::new(ErrorKind::Unsupported { what: "flags in a safetensors file" }));
                }
                let mut out = crate::enc::json_after(header, 8);
                let n = align_up(out.len() as u64 - 8, 8, "header length")?;
                if n > SAFETENSORS_MAX_HEADER {
                    return Err(Error::new(ErrorKind::SafetensorsHeaderCap { len: n }));
                }
                out[..8].copy_from_slice(&n.to_le_bytes());
                out.resize(8 + n as usize, b' ');
                Ok(out)
            }
            Format::Bintensors => {
                if flags != Flags::EMPTY {
                    return Err(Error::new(ErrorKind::Unsupported { what: "flags in a bintensors file" }));
                }
                crate::bintensors::encode(header.metadata(), header.tensors())
            }
        }
    }

    /// [`Head::encode`], padded with spaces to exactly `len` bytes: a writer
    /// that streams compressed tensors reserves the head of the largest
    /// header they can need ([`Head::encode`] of the header with every chunk
    /// at its raw length) and writes the real one in its place at the end.
    ///
    /// # Errors
    /// As [`Head::encode`]; `Unsupported` for a safetensors or bintensors
    /// header, `LimitExceeded` if the header does not fit in `len` bytes or
    /// `len` is not a multiple of 64 and of the header's alignment.
    pub fn encode_reserved(header: &Header, flags: Flags, len: u64) -> Result<Vec<u8>> {
        if header.format() != Format::Deathtensors {
            return Err(Error::new(ErrorKind::Unsupported { what: "a reserved head for safetensors or bintensors" }));
        }
        let mut out = Head::encode(header, flags)?;
        let align = DATA_START_ALIGN.max(header.alignment());
        if (out.len() as u64) > len || !len.is_multiple_of(align) {
            return Err(Error::limit("reserved head length", out.len() as u64, len));
        }
        check_header_len(len - Prefix::LEN as u64, &Limits::DEFAULT, 16)?;
        let header_len = len - Prefix::LEN as u64;
        out[16..24].copy_from_slice(&header_len.to_le_bytes());
        out.resize(len as usize, b' ');
        Ok(out)
    }

    /// Where the tag table, header MAC and blob of an encrypted header sit,
    /// after a head of `head_len` bytes as [`Head::encode`] made it.
    ///
    /// # Errors
    /// `Overflow` if an offset does not fit in a `u64`.
    pub fn tables_for(header: &Header, head_len: u64) -> Result<Option<TableLayout>> {
        header
            .encryption()
            .map(|e| {
                // A sealed header sits between the head and the tag table.
                let sealed = e.sealed_header.map_or(0, |n| n + crate::crypt::TAG_LEN as u64);
                let start = head_len.checked_add(sealed).ok_or_else(|| Error::overflow("tag table start"))?;
                TableLayout::new(start, e.tag_table_len, header.alignment())
            })
            .transpose()
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

    /// Whether the data blob is one zstd frame (flag bit 0).
    pub fn is_compressed(&self) -> bool {
        self.flags.contains(Flags::ZSTD)
    }

    /// Whether tensors are compressed one by one (flag bit 5).
    pub fn is_chunk_compressed(&self) -> bool {
        self.flags.contains(Flags::COMPRESSED)
    }
}

/// Flag bit 5 goes with neither bit 0 nor bit 2 (`docs/FORMAT.md` section 15.4).
fn check_compression_flags(flags: Flags) -> Result<()> {
    if !flags.contains(Flags::COMPRESSED) {
        return Ok(());
    }
    if flags.contains(Flags::ZSTD) {
        return Err(Error::new(ErrorKind::Unsupported { what: "a zstd blob with per-tensor compression" }));
    }
    if flags.contains(Flags::ENCRYPTED) {
        return Err(Error::new(ErrorKind::Unsupported { what: "compression with encryption" }));
    }
    Ok(())
}

/// Whether a head that is not deathtensors' is bintensors': its 9th byte is
/// the metadata option tag (0x00 or 0x01), where safetensors has `{`.
fn is_bintensors(head: &[u8]) -> bool {
    matches!(head.get(8), Some(0 | 1))
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
