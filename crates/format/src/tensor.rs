//! The plain types of a header: formats, metadata, tensors and the rules
//! for their names. The bottom of the crate: every other module may use
//! these, and this module uses none of them but [`Shape`] and [`Name`].

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use crate::{Dtype, Error, ErrorKind, Limits, Name, Result, Shape};

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
    /// bintensors 0.2 (8-byte length prefix, then a binary header): read and
    /// written as bintensors' own code does.
    Bintensors,
}

/// One tensor of a header: what it is and where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name, unique in its file.
    pub name: Name,
    /// The element type.
    pub dtype: Dtype,
    /// The dimensions; empty for a scalar.
    pub shape: Shape,
    /// `[start, end)` byte offsets relative to the start of the data blob.
    pub data_offsets: (u64, u64),
    /// Per-tensor string metadata (deathtensors only; empty for safetensors).
    pub metadata: Metadata,
    /// SHA-256 of the tensor's bytes, if the writer recorded one. Boxed: a
    /// digest is 32 bytes that most headers do not have, and every tensor
    /// of a decoded header holds this field.
    pub sha256: Option<Box<[u8; 32]>>,
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
            name: String::from(&self.name),
            dtype: self.dtype,
            shape: self.shape.to_vec(),
            metadata: self.metadata.clone(),
            sha256: None,
        }
    }

    /// Number of bytes of the tensor's data (raw: after decompression, for
    /// a compressed tensor), from its dtype and shape.
    ///
    /// Headers are validated on construction, so this cannot overflow.
    pub fn byte_len(&self) -> u64 {
        self.dtype.byte_len(self.numel()).unwrap_or(0)
    }

    /// Number of bytes the tensor takes in the data blob: its
    /// `data_offsets` span. Equal to [`TensorInfo::byte_len`] unless the
    /// tensor is stored compressed (`docs/FORMAT.md` section 15).
    pub fn stored_len(&self) -> u64 {
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
