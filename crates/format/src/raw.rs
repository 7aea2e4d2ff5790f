//! What the JSON pass yields, before the layout is checked.

use alloc::string::String;
use alloc::vec::Vec;

use crate::crypt::Encryption;
use crate::tensor::{Format, Metadata, TensorInfo};

/// Output of the JSON pass, before layout validation.
#[derive(Debug, PartialEq)]
pub(crate) struct RawHeader {
    pub(crate) format: Format,
    pub(crate) created_by: Option<String>,
    pub(crate) alignment: Option<u64>,
    pub(crate) metadata: Option<Metadata>,
    /// Decoded as they are, in header order; their layout is not checked yet.
    pub(crate) tensors: Vec<TensorInfo>,
    /// The `encryption` section (deathtensors only).
    pub(crate) encryption: Option<Encryption>,
    /// The `compression` section (deathtensors only), its tables not yet
    /// matched to the tensors.
    pub(crate) compression: Option<crate::compression::RawCompression>,
}
