//! The decoded header: tensors, their layout and metadata.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::{de, layout, Dtype, Error, ErrorKind, Limits, Result};

/// String metadata, global or per tensor. Keys are unique and kept sorted, so
/// encoding is deterministic.
pub type Metadata = BTreeMap<String, String>;

/// The on-disk format a header belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// deathtensors v1 (`DTLEGION` prefix).
    Deathtensors,
    /// safetensors (8-byte length prefix).
    Safetensors,
}

/// One tensor of a header: what it is and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name, unique in its file.
    pub name: String,
    /// The element type.
    pub dtype: Dtype,
    /// The dimensions; empty for a scalar.
    pub shape: Vec<u64>,
    /// `[start, end)` byte offsets relative to the start of the data blob.
    pub data_offsets: (u64, u64),
    /// Per-tensor string metadata (deathtensors only; empty for safetensors).
    pub metadata: Metadata,
    /// SHA-256 of the tensor's bytes, if the writer recorded one.
    pub sha256: Option<[u8; 32]>,
}

impl TensorInfo {
    /// Number of elements (the product of the shape; 1 for a scalar).
    ///
    /// Headers are validated on construction, so this cannot overflow.
    pub fn numel(&self) -> u64 {
        // Validated in `layout::check`: the product fits, or a zero makes it 0.
        numel(&self.shape).unwrap_or(0)
    }

    /// A spec for writing this tensor to another file: everything but its
    /// offsets and digest (a writer lays out and hashes anew).
    pub fn to_spec(&self) -> TensorSpec {
        TensorSpec {
            name: self.name.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            metadata: self.metadata.clone(),
            sha256: None,
        }
    }

    /// Number of bytes of the tensor's data.
    pub fn byte_len(&self) -> u64 {
        self.data_offsets.1 - self.data_offsets.0
    }
}

/// Number of elements of a shape, or `None` on overflow. A zero dimension
/// makes the product zero whatever the other dimensions are.
pub(crate) fn numel(shape: &[u64]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// A tensor to lay out: everything of a [`TensorInfo`] but its offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name.
    pub name: String,
    /// The element type.
    pub dtype: Dtype,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// Per-tensor metadata (deathtensors only).
    pub metadata: Metadata,
    /// SHA-256 of the tensor's bytes, to record in the header (deathtensors only).
    pub sha256: Option<[u8; 32]>,
}

impl TensorSpec {
    /// Bytes of the tensor's data.
    ///
    /// # Errors
    /// `Overflow` or `MisalignedSubByte` if the size is not representable.
    pub fn byte_len(&self) -> Result<u64> {
        let n = numel(&self.shape).ok_or_else(|| Error::overflow("element count"))?;
        self.dtype.byte_len(n).map_err(|e| e.with_tensor(&self.name))
    }

    /// A spec with no metadata and no digest.
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: impl Into<Vec<u64>>) -> TensorSpec {
        TensorSpec { name: name.into(), dtype, shape: shape.into(), metadata: Metadata::new(), sha256: None }
    }
}

/// Output of the JSON pass, before layout validation.
#[derive(Debug, PartialEq)]
pub(crate) struct RawHeader {
    pub(crate) format: Format,
    pub(crate) created_by: Option<String>,
    pub(crate) alignment: Option<u64>,
    pub(crate) metadata: Option<Metadata>,
    /// Decoded as they are, in header order; their layout is not checked yet.
    pub(crate) tensors: Vec<TensorInfo>,
}

/// The name written in `created_by` by this crate's deathtensors encoder.
pub const CREATED_BY: &str = concat!("deathtensors ", env!("CARGO_PKG_VERSION"), " (rust)");

/// A validated header of either format.
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
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    data_len: u64,
}

impl PartialEq for Header {
    fn eq(&self, other: &Header) -> bool {
        self.format == other.format
            && self.created_by == other.created_by
            && self.metadata == other.metadata
            && self.alignment == other.alignment
            && self.tensors == other.tensors
    }
}

impl Eq for Header {}

/// Checks a tensor name against the rules shared by both formats.
pub(crate) fn check_name(name: &str, limits: &Limits) -> Result<()> {
    if name.is_empty() {
        return Err(Error::new(ErrorKind::EmptyName));
    }
    if name.len() as u64 > limits.max_name_len {
        return Err(Error::limit("tensor name length", name.len() as u64, limits.max_name_len));
    }
    // Names are almost always printable ASCII: check that first without
    // branching per byte (this vectorizes), and look closer only otherwise.
    let plain = name.bytes().fold(true, |plain, b| plain & (0x20..0x7f).contains(&b));
    if !plain
        && (name.bytes().any(|b| b < 0x20 || b == 0x7f) || name.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)))
    {
        return Err(Error::new(ErrorKind::ControlCharacterInName));
    }
    Ok(())
}

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

    /// Decodes and validates a JSON header of the given format.
    ///
    /// # Errors
    /// As [`Header::parse_deathtensors`].
    pub fn parse(json: &[u8], format: Format, limits: &Limits) -> Result<Header> {
        if json.len() as u64 > limits.max_header_len {
            return Err(Error::limit("header length", json.len() as u64, limits.max_header_len));
        }
        let raw = de::parse(json, format, limits)?;
        let alignment = match raw.alignment {
            None => 1,
            Some(a) => layout::check_alignment(a)?,
        };
        Header::build(raw.format, raw.created_by, raw.metadata, alignment, raw.tensors)
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
        Header::build(Format::Deathtensors, created_by, Some(global_metadata), alignment, tensors)
    }

    /// Lays out a safetensors header exactly as safetensors 0.8.0 does: tensors
    /// sorted by descending dtype (in [`Dtype`]'s order), then by name, packed
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
        Header::build(Format::Safetensors, None, metadata, 1, tensors)
    }

    fn build(
        format: Format,
        created_by: Option<String>,
        metadata: Option<Metadata>,
        alignment: u64,
        tensors: Vec<TensorInfo>,
    ) -> Result<Header> {
        let hasher = DefaultHashBuilder::default();
        let mut index = HashTable::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let hash = hasher.hash_one(t.name.as_str());
            let entry = index.entry(
                hash,
                |&j: &u32| tensors[j as usize].name == t.name,
                |&j: &u32| hasher.hash_one(tensors[j as usize].name.as_str()),
            );
            match entry {
                hashbrown::hash_table::Entry::Occupied(_) => {
                    let within = match format {
                        Format::Deathtensors => "tensors",
                        Format::Safetensors => "header",
                    };
                    return Err(Error::new(ErrorKind::DuplicateKey { within, key: t.name.as_str().into() }));
                }
                hashbrown::hash_table::Entry::Vacant(v) => {
                    // `tensors.len()` is bounded by `Limits::max_tensors`, far below u32::MAX.
                    v.insert(i as u32);
                }
            }
        }
        // After the duplicate check: a repeated name is the problem to
        // report, not the overlap of its two entries' byte ranges.
        if format == Format::Safetensors {
            // safetensors 0.8 has no complex128: its readers refuse the file.
            if let Some(t) = tensors.iter().find(|t| t.dtype == Dtype::C128) {
                return Err(Error::new(ErrorKind::UnknownDtype("C128".into())).with_tensor(&t.name));
            }
        }
        let data_len = layout::check(&tensors, alignment)?;
        Ok(Header { format, created_by, metadata, alignment, tensors, index, hasher, data_len })
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
    /// `__metadata__` of safetensors (`None` when absent).
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
        let hash = self.hasher.hash_one(name);
        self.index.find(hash, |&j| self.tensors[j as usize].name == name).map(|&j| j as usize)
    }

    /// Length of the (uncompressed) data blob: where the last tensor ends.
    pub fn data_len(&self) -> u64 {
        self.data_len
    }

    /// Whether every tensor carries a `sha256` digest (vacuously true for none).
    pub fn has_tensor_digests(&self) -> bool {
        self.tensors.iter().all(|t| t.sha256.is_some())
    }
}
