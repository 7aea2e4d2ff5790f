//! The decoded header: tensors, their layout and metadata.

use crate::compression::{ChunkTable, Compression, RawCompression};
use crate::crypt::Encryption;
use crate::index::Index;
use crate::tensor::{Format, Metadata, TensorInfo, TensorSpec};
use crate::{de, layout, Error, ErrorKind, Limits, Result};
use alloc::string::String;
use alloc::vec::Vec;

/// The name written in `created_by` by this crate's deathtensors encoder.
pub const CREATED_BY: &str = concat!("deathtensors ", env!("CARGO_PKG_VERSION"), " (rust)");

/// A validated header of any of the three formats.
///
/// Every `Header` satisfies the validation rules of its format (see
/// `docs/FORMAT.md`): unique valid names, known dtypes, sizes that fit in a
/// `u64`, and a canonical layout of the data blob with no overlap, no hole
/// and no byte left unowned up to [`Header::data_len`].
#[derive(Clone, Debug)]
pub struct Header {
    format: Format,
    created_by: Option<String>,
    metadata: Option<Metadata>,
    alignment: u64,
    tensors: Vec<TensorInfo>,
    index: Index,
    data_len: u64,
    encryption: Option<Encryption>,
    /// For an encrypted header: each tensor's first chunk in the tag table.
    chunk_bases: Vec<u64>,
    /// The `compression` section's file-wide fields (flag bit 5).
    compression: Option<Compression>,
    /// With `compression`: each tensor's chunk table (stored lengths), by
    /// position; `None` for a tensor stored raw. Empty otherwise.
    chunks: Vec<Option<Vec<u64>>>,
}

impl PartialEq for Header {
    fn eq(&self, other: &Header) -> bool {
        self.format == other.format
            && self.created_by == other.created_by
            && self.metadata == other.metadata
            && self.alignment == other.alignment
            && self.tensors == other.tensors
            && self.encryption == other.encryption
            && self.compression == other.compression
            && self.chunks == other.chunks
    }
}

impl Eq for Header {}

impl Header {
    /// Decodes and validates the JSON header of a deathtensors v1 file.
    ///
    /// `json` is the header as stored, trailing spaces included. For a whole
    /// file, use [`crate::Head::parse`], which also checks the prefix and the blob.
    ///
    /// # Errors
    /// Every rule of `docs/FORMAT.md` has its own [`ErrorKind`]: invalid UTF-8
    /// or JSON, wrong types, duplicate or unknown keys, unknown dtypes, bad
    /// shapes, overflowing sizes, offsets that are reversed, overlapping,
    /// mismatched or not canonically laid out, bad names, and exceeded limits.
    pub fn parse_deathtensors(json: &[u8], limits: &Limits) -> Result<Header> {
        Header::parse(json, Format::Deathtensors, limits)
    }

    /// Decodes and validates the JSON header of a safetensors file, with all
    /// of safetensors 0.8's rules and ours (no duplicate keys, valid names).
    ///
    /// # Errors
    /// As [`Header::parse_deathtensors`].
    pub fn parse_safetensors(json: &[u8], limits: &Limits) -> Result<Header> {
        Header::parse(json, Format::Safetensors, limits)
    }

    /// Decodes and validates the binary header of a bintensors 0.2 file:
    /// the `N` bytes after its 8-byte length, padding included.
    ///
    /// # Errors
    /// Every rule of bintensors' reader, and ours (see `docs/FORMAT.md`,
    /// "bintensors files"): `Truncated` if a length runs past the header,
    /// `InvalidBintensors` for a malformed varint, option tag or padding,
    /// `InvalidUtf8`, `UnknownDtype`, `LimitExceeded` (header length,
    /// bincode's decode budget, tensor count, rank, name length),
    /// `DuplicateKey` for a repeated metadata key or tensor name, bad names,
    /// and offsets that do not pack the tensors in header order.
    pub fn parse_bintensors(header: &[u8], limits: &Limits) -> Result<Header> {
        Header::parse(header, Format::Bintensors, limits)
    }

    /// Decodes and validates a header of the given format: JSON for
    /// deathtensors and safetensors, binary for bintensors.
    ///
    /// # Errors
    /// As [`Header::parse_deathtensors`] or [`Header::parse_bintensors`].
    pub fn parse(json: &[u8], format: Format, limits: &Limits) -> Result<Header> {
        Header::parse_forked(json, format, limits, &crate::Serial)
    }

    /// [`Header::parse`] with a second thread lent through `fork`.
    pub(crate) fn parse_forked(json: &[u8], format: Format, limits: &Limits, fork: &dyn crate::Fork) -> Result<Header> {
        let cap = match format {
            Format::Safetensors => crate::limits::safetensors_limits(limits).max_header_len,
            Format::Deathtensors => limits.max_header_len,
            Format::Bintensors => {
                let decoded = crate::bintensors::decode(json, limits)?;
                return Header::build(
                    Format::Bintensors,
                    None,
                    decoded.metadata,
                    1,
                    decoded.tensors,
                    None,
                    &crate::Serial,
                );
            }
        };
        if json.len() as u64 > cap {
            return Err(Error::limit("header length", json.len() as u64, cap));
        }
        let raw = de::parse(json, format, limits, fork)?;
        let alignment = match raw.alignment {
            None => 1,
            Some(a) => layout::check_alignment(a)?,
        };
        if raw.compression.is_some() && raw.encryption.is_some() {
            return Err(Error::new(ErrorKind::Unsupported { what: "compression with encryption" }));
        }
        let header =
            Header::build(raw.format, raw.created_by, raw.metadata, alignment, raw.tensors, raw.compression, fork)?;
        match raw.encryption {
            Some(e) => header.with_encryption_within(e, limits),
            None => Ok(header),
        }
    }

    /// Lays out a deathtensors v1 header: tensors in the given order, each
    /// starting at the next multiple of `alignment` (1, or a power of two up
    /// to [`crate::MAX_ALIGNMENT`]; 64 is the default of our writers).
    ///
    /// # Errors
    /// - `InvalidAlignment` for a bad alignment.
    /// - `EmptyName`, `ControlCharacterInName`, `LimitExceeded` for bad names
    ///   or too many tensors; `DuplicateKey` for a repeated name.
    /// - `Overflow` or `MisalignedSubByte` if a tensor's size is not representable.
    pub fn new_deathtensors(
        specs: Vec<TensorSpec>,
        global_metadata: Metadata,
        alignment: u64,
        created_by: Option<String>,
        limits: &Limits,
    ) -> Result<Header> {
        let alignment = layout::check_alignment(alignment)?;
        let tensors = layout::plan(specs, alignment, limits)?;
        Header::build(Format::Deathtensors, created_by, Some(global_metadata), alignment, tensors, None, &crate::Serial)
    }

    /// Lays out a deathtensors v1 header of compressed tensors
    /// (`docs/FORMAT.md` section 15): as [`Header::new_deathtensors`], with
    /// spec `i` stored as the chunks `tables[i]` lists (stored lengths), or
    /// raw where that is `None` (or past the end of `tables`). Digests in
    /// the specs are of the raw bytes.
    ///
    /// # Errors
    /// As [`Header::new_deathtensors`], and `InvalidCompression` if
    /// `compression` or a table breaks a rule of section 15.2,
    /// `LimitExceeded` for more than `limits.max_chunks` chunks.
    pub fn new_compressed(
        specs: Vec<TensorSpec>,
        global_metadata: Metadata,
        alignment: u64,
        created_by: Option<String>,
        compression: Compression,
        tables: Vec<Option<Vec<u64>>>,
        limits: &Limits,
    ) -> Result<Header> {
        let alignment = layout::check_alignment(alignment)?;
        let mut stored = Vec::with_capacity(specs.len());
        let mut named = Vec::new();
        let mut total = 0u64;
        for (spec, table) in specs.iter().zip(tables.into_iter().chain(core::iter::repeat(None))) {
            match table {
                Some(lens) => {
                    total = total.saturating_add(lens.len() as u64);
                    let raw = spec.byte_len()?;
                    let sum = crate::compression::check_table(raw, compression.chunk_size, &lens)
                        .map_err(|e| e.with_tensor(&spec.name))?;
                    stored.push(Some(sum));
                    named.push((spec.name.clone(), lens));
                }
                None => stored.push(None),
            }
        }
        if total > limits.max_chunks {
            return Err(Error::limit("chunk count", total, limits.max_chunks));
        }
        let tensors = layout::plan_stored(specs, alignment, limits, &stored)?;
        let raw = RawCompression { compression, tensors: named };
        Header::build(
            Format::Deathtensors,
            created_by,
            Some(global_metadata),
            alignment,
            tensors,
            Some(raw),
            &crate::Serial,
        )
    }

    /// Lays out a safetensors header exactly as safetensors 0.8.0 does: tensors
    /// sorted by descending dtype (in [`Dtype`](crate::Dtype)'s order), then by name, packed
    /// with no padding. Per-tensor metadata and digests are not representable
    /// in safetensors and are dropped.
    ///
    /// # Errors
    /// As [`Header::new_deathtensors`], plus `ReservedName` for a tensor named
    /// `__metadata__`.
    pub fn new_safetensors(mut specs: Vec<TensorSpec>, metadata: Option<Metadata>, limits: &Limits) -> Result<Header> {
        if let Some(spec) = specs.iter().find(|s| s.name == "__metadata__") {
            return Err(Error::new(ErrorKind::ReservedName).with_tensor(&spec.name));
        }
        specs.sort_by(|a, b| b.dtype.cmp(&a.dtype).then_with(|| a.name.cmp(&b.name)));
        for spec in &mut specs {
            spec.metadata.clear();
            spec.sha256 = None;
        }
        let tensors = layout::plan(specs, 1, limits)?;
        Header::build(Format::Safetensors, None, metadata, 1, tensors, None, &crate::Serial)
    }

    /// Lays out a bintensors 0.2 header exactly as bintensors 0.2 does:
    /// tensors sorted by descending dtype (bintensors numbers its 15 dtypes
    /// in [`Dtype`](crate::Dtype)'s order), then by name, packed with no padding.
    /// `metadata` `None` and `Some` of an empty map are different files, as
    /// in bintensors. Per-tensor metadata and digests are dropped.
    ///
    /// # Errors
    /// As [`Header::new_deathtensors`], plus `UnsupportedDtype` (naming the
    /// tensor) for a dtype bintensors does not have.
    pub fn new_bintensors(mut specs: Vec<TensorSpec>, metadata: Option<Metadata>, limits: &Limits) -> Result<Header> {
        if let Some(spec) = specs.iter().find(|s| crate::bintensors::dtype_index(s.dtype).is_none()) {
            return Err(crate::bintensors::unsupported(spec.dtype).with_tensor(&spec.name));
        }
        // The dtype index is the key, said explicitly: it is what bintensors sorts by.
        specs.sort_by(|a, b| {
            let index = |s: &TensorSpec| crate::bintensors::dtype_index(s.dtype);
            index(b).cmp(&index(a)).then_with(|| a.name.cmp(&b.name))
        });
        for spec in &mut specs {
            spec.metadata.clear();
            spec.sha256 = None;
        }
        let tensors = layout::plan(specs, 1, limits)?;
        Header::build(Format::Bintensors, None, metadata, 1, tensors, None, &crate::Serial)
    }

    /// The header of laid-out `tensors`, checked: the name index and the
    /// layout check of a large header are made at once through `fork` (they
    /// share nothing); `&crate::Serial` makes them one after the other.
    fn build(
        format: Format,
        created_by: Option<String>,
        metadata: Option<Metadata>,
        alignment: u64,
        tensors: Vec<TensorInfo>,
        compression: Option<RawCompression>,
        fork: &dyn crate::Fork,
    ) -> Result<Header> {
        // A compression section's tables are matched through the index
        // before the layout check can run; a bintensors layout is checked
        // in header order after its dtypes. Otherwise a large header's
        // layout is checked while the index is built.
        let beside = compression.is_none() && format != Format::Bintensors;
        let mut laid_out = None;
        let index = Index::build(format, &tensors, fork, &mut || {
            if beside {
                laid_out = Some(layout::check(&tensors, alignment, &[]));
            }
        })?;
        // After the duplicate check: a repeated name is the problem to
        // report, not the overlap of its two entries' byte ranges.
        if format == Format::Safetensors {
            // safetensors 0.8 has no complex128: its readers refuse the file.
            if let Some(t) = tensors.iter().find(|t| !format.holds(t.dtype)) {
                return Err(Error::new(ErrorKind::UnknownDtype(t.dtype.name().into())).with_tensor(&t.name));
            }
        }
        let data_len = match format {
            Format::Bintensors => {
                if let Some(t) = tensors.iter().find(|t| crate::bintensors::dtype_index(t.dtype).is_none()) {
                    return Err(crate::bintensors::unsupported(t.dtype).with_tensor(&t.name));
                }
                layout::check_in_order(&tensors)?
            }
            Format::Deathtensors | Format::Safetensors => match laid_out {
                Some(laid_out) => laid_out?,
                None => {
                    let stored = match &compression {
                        Some(c) => Header::match_tables(c, &tensors, &index)?,
                        None => Vec::new(),
                    };
                    layout::check(&tensors, alignment, &stored)?
                }
            },
        };
        let (section, chunks) = match compression {
            Some(c) => {
                let mut chunks: Vec<Option<Vec<u64>>> = (0..tensors.len()).map(|_| None).collect();
                for (name, lens) in c.tensors {
                    let i = index.find(&tensors, &name).unwrap_or(0);
                    if let Some(slot) = chunks.get_mut(i) {
                        *slot = Some(lens);
                    }
                }
                (Some(c.compression), chunks)
            }
            None => (None, Vec::new()),
        };
        Ok(Header {
            format,
            created_by,
            metadata,
            alignment,
            tensors,
            index,
            data_len,
            encryption: None,
            chunk_bases: Vec::new(),
            compression: section,
            chunks,
        })
    }

    /// Matches a `compression` section's tables to the tensors and checks
    /// each: returns each tensor's stored length (`None` for raw tensors).
    fn match_tables(c: &RawCompression, tensors: &[TensorInfo], index: &Index) -> Result<Vec<Option<u64>>> {
        c.compression.check()?;
        let mut stored: Vec<Option<u64>> = alloc::vec![None; tensors.len()];
        for (name, lens) in &c.tensors {
            let Some(i) = index.find(tensors, name) else {
                return Err(crate::compression::invalid("tensor name (not in tensors)").with_tensor(name));
            };
            let t = &tensors[i];
            let numel =
                crate::tensor::numel(&t.shape).ok_or_else(|| Error::overflow("element count").with_tensor(name))?;
            let raw = t.dtype.byte_len(numel).map_err(|e| e.with_tensor(name))?;
            let sum = crate::compression::check_table(raw, c.compression.chunk_size, lens)
                .map_err(|e| e.with_tensor(name))?;
            if stored[i].is_some() {
                return Err(Error::new(ErrorKind::DuplicateKey {
                    within: "compression.tensors",
                    key: name.as_str().into(),
                }));
            }
            stored[i] = Some(sum);
        }
        Ok(stored)
    }

    /// This deathtensors header with an `encryption` section: its tensors'
    /// data is encrypted as `docs/FORMAT.md` section 10 says.
    ///
    /// # Errors
    /// - `Unsupported` for a safetensors header.
    /// - `InvalidEncryption` if the section breaks a rule, or its tag table
    ///   length is not 16 bytes per chunk of these tensors.
    /// - `LimitExceeded` if the tag table is longer than the default header
    ///   limit.
    pub fn with_encryption(self, encryption: Encryption) -> Result<Header> {
        self.with_encryption_within(encryption, &Limits::DEFAULT)
    }

    /// [`Header::with_encryption`] with the tag table bounded by
    /// `limits.max_header_len` (a reader's limits) instead of the default.
    ///
    /// # Errors
    /// As [`Header::with_encryption`].
    pub fn with_encryption_within(mut self, encryption: Encryption, limits: &Limits) -> Result<Header> {
        if self.format != Format::Deathtensors {
            return Err(Error::new(ErrorKind::Unsupported { what: "encryption in a safetensors or bintensors file" }));
        }
        encryption.check()?;
        // Bounded before anything else: a reader reads the whole table when
        // it opens the file, before any key or signature is checked.
        if encryption.tag_table_len > limits.max_header_len {
            return Err(Error::limit("tag table length", encryption.tag_table_len, limits.max_header_len));
        }
        if let Some(n) = encryption.sealed_header {
            if n > limits.max_header_len {
                return Err(Error::limit("sealed header length", n, limits.max_header_len));
            }
            // The outer header of a sealed file lists no tensor: its tag
            // table is checked against the inner header, once unsealed.
            if self.tensors.is_empty() && self.metadata.as_ref().is_none_or(|m| m.is_empty()) {
                self.encryption = Some(encryption);
                return Ok(self);
            }
        }
        let (bases, total) = crate::crypt::chunk_bases(&self.tensors, encryption.chunk_size)?;
        let table_len =
            total.checked_mul(crate::crypt::TAG_LEN as u64).ok_or_else(|| Error::overflow("tag table length"))?;
        if table_len > limits.max_header_len {
            return Err(Error::limit("tag table length", table_len, limits.max_header_len));
        }
        if encryption.tag_table_len != table_len {
            return Err(Error::new(ErrorKind::InvalidEncryption { what: "tag_table.length" }));
        }
        self.encryption = Some(encryption);
        self.chunk_bases = bases;
        Ok(self)
    }

    /// The same header without its `encryption` section: the inner header of
    /// a sealed file.
    pub(crate) fn without_encryption(&self) -> Header {
        Header { encryption: None, chunk_bases: Vec::new(), ..self.clone() }
    }

    /// The outer header of a sealed file: no tensor, no metadata, the same
    /// alignment and `encryption` section.
    pub(crate) fn sealed_outer(&self) -> Header {
        Header {
            created_by: None,
            metadata: Some(Metadata::new()),
            tensors: Vec::new(),
            index: Index::default(),
            data_len: 0,
            chunk_bases: Vec::new(),
            ..self.clone()
        }
    }

    /// The `compression` section's file-wide fields, if tensors are
    /// compressed (flag bit 5).
    pub fn compression(&self) -> Option<&Compression> {
        self.compression.as_ref()
    }

    /// The chunk table of the tensor at `position` (header order), if it is
    /// stored compressed.
    pub fn chunk_table(&self, position: usize) -> Option<ChunkTable<'_>> {
        let c = self.compression.as_ref()?;
        let lens = self.chunks.get(position)?.as_deref()?;
        let raw = self.tensors.get(position)?.byte_len();
        Some(ChunkTable::new(raw, c.chunk_size, lens))
    }

    /// The sum of every tensor's raw byte length: what loading every tensor
    /// takes, whatever the storage.
    pub fn raw_len(&self) -> u64 {
        self.tensors.iter().fold(0u64, |acc, t| acc.saturating_add(t.byte_len()))
    }

    /// The `encryption` section, if the tensors are encrypted.
    pub fn encryption(&self) -> Option<&Encryption> {
        self.encryption.as_ref()
    }

    /// For an encrypted header, the index in the tag table of the first
    /// chunk of the tensor at `position` (header order).
    pub fn chunk_base(&self, position: usize) -> Option<u64> {
        self.chunk_bases.get(position).copied()
    }

    /// The format of the file this header belongs to.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The `created_by` field (deathtensors only).
    pub fn created_by(&self) -> Option<&str> {
        self.created_by.as_deref()
    }

    /// Global metadata: `global_metadata` of deathtensors (always present),
    /// `__metadata__` of safetensors (`None` when absent), bintensors'
    /// optional map (`None` and an empty map are different files).
    pub fn metadata(&self) -> Option<&Metadata> {
        self.metadata.as_ref()
    }

    /// The alignment of tensor starts in the data blob (1 when the header
    /// does not declare one, as in deathtensors 0.3.0 and safetensors files).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The tensors in header order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    /// Whether the header has no tensor.
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The tensor with this name, in O(1).
    pub fn get(&self, name: &str) -> Option<&TensorInfo> {
        self.position(name).map(|i| &self.tensors[i])
    }

    /// The index in [`Header::tensors`] of the tensor with this name, in O(1).
    pub fn position(&self, name: &str) -> Option<usize> {
        self.index.find(&self.tensors, name)
    }

    /// Length of the (uncompressed) data blob: where the last tensor ends.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Whether every tensor carries a `sha256` digest (vacuously true for none).
    pub fn has_tensor_digests(&self) -> bool {
        self.tensors.iter().all(|t| t.sha256.is_some())
    }

    /// Gives the tensor at `position` the digest `sha256`, one a commitment
    /// held outside the file vouches for (a signed model statement): reads
    /// then check the tensor against it. The header's bytes are unchanged;
    /// this is the reader's view of them. Returns false if there is no such
    /// tensor.
    pub fn set_tensor_digest(&mut self, position: usize, sha256: [u8; 32]) -> bool {
        match self.tensors.get_mut(position) {
            Some(t) => {
                t.sha256 = Some(alloc::boxed::Box::new(sha256));
                true
            }
            None => false,
        }
    }
}
