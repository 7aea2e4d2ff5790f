//! The one error type of this crate.

use alloc::boxed::Box;
use core::fmt;

/// The result type of this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error from parsing, validating or laying out a header.
///
/// It carries what went wrong ([`ErrorKind`]), the tensor it concerns when
/// there is one, and the byte offset in the file where the problem was found
/// when that is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    tensor: Option<Box<str>>,
    offset: Option<u64>,
}

/// What went wrong. New variants may be added in minor releases.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The input ended before the named structure was complete.
    Truncated {
        /// The structure that was cut short.
        what: &'static str,
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes that were available.
        available: u64,
    },
    /// The input is not a deathtensors, safetensors or bintensors file.
    UnrecognizedFormat {
        /// What the bytes look like instead, when recognisable
        /// (a Git LFS pointer, an HTML page, ...).
        looks_like: Option<&'static str>,
    },
    /// The version field of the prefix names a version this crate cannot read.
    UnsupportedVersion(u32),
    /// The flags field has bits set that this crate does not know.
    UnknownFlags(u32),
    /// The file uses a feature this crate recognises but does not implement.
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// A configured limit was exceeded.
    LimitExceeded {
        /// What was counted or measured.
        what: &'static str,
        /// The value found.
        value: u64,
        /// The limit in force.
        limit: u64,
    },
    /// A safetensors header to write is longer than safetensors' own cap
    /// ([`crate::SAFETENSORS_MAX_HEADER`]), which its readers enforce: the
    /// file belongs in the deathtensors format.
    SafetensorsHeaderCap {
        /// The header's length, in bytes.
        len: u64,
    },
    /// The bytes between the JSON header and the data blob are not zero.
    NonZeroPadding,
    /// The header is not valid UTF-8.
    InvalidUtf8,
    /// The header is not valid JSON.
    InvalidJson {
        /// The JSON parser's description of the problem.
        message: Box<str>,
    },
    /// A JSON value has the wrong type.
    WrongType {
        /// The field or structure.
        what: &'static str,
        /// The type that was expected.
        expected: &'static str,
    },
    /// The same key appears twice in one JSON object.
    DuplicateKey {
        /// The object the key is in.
        within: &'static str,
        /// The repeated key.
        key: Box<str>,
    },
    /// A required field is missing.
    MissingField {
        /// The field.
        field: &'static str,
    },
    /// A field this format does not define.
    UnknownField {
        /// The field.
        field: Box<str>,
    },
    /// The `format` field is not `"deathtensors"`.
    WrongFormatName,
    /// The `format_version` field names a version this crate cannot read.
    UnsupportedFormatVersion(u64),
    /// The dtype is not one this crate knows.
    UnknownDtype(Box<str>),
    /// A shape dimension is not a non-negative integer.
    InvalidDimension,
    /// `data_offsets` is not an array of two non-negative integers.
    InvalidOffsets,
    /// A size or offset computation overflowed.
    Overflow {
        /// What was being computed.
        what: &'static str,
    },
    /// The data of a sub-byte dtype does not end on a byte boundary.
    MisalignedSubByte,
    /// `data_offsets` has its end before its start.
    OffsetsReversed {
        /// The start offset.
        start: u64,
        /// The end offset.
        end: u64,
    },
    /// The byte range does not match the tensor's dtype and shape.
    ByteLengthMismatch {
        /// Bytes implied by dtype and shape.
        expected: u64,
        /// Bytes given by `data_offsets`.
        actual: u64,
    },
    /// The tensor's bytes extend past the end of the data blob: the file
    /// was cut short (or its header lies about its tensors).
    OffsetOutOfBounds {
        /// The end offset of the tensor.
        end: u64,
        /// The length of the data blob.
        data_len: u64,
        /// The file's length its header asks for (through its tensors).
        file_needed: u64,
        /// The file's actual length.
        file_len: u64,
    },
    /// The tensor's bytes overlap another tensor's.
    Overlap {
        /// The other tensor.
        other: Box<str>,
    },
    /// A gap before the tensor other than the canonical alignment padding.
    UnexpectedGap {
        /// Where the tensor must start.
        expected: u64,
        /// Where it starts.
        actual: u64,
    },
    /// Bytes at the end of the data blob that no tensor owns.
    UnownedBytes {
        /// Where the last tensor ends.
        covered: u64,
        /// The length of the data blob.
        data_len: u64,
    },
    /// A tensor name is empty.
    EmptyName,
    /// A tensor name contains a control character.
    ControlCharacterInName,
    /// A tensor name is reserved by the format (`__metadata__` in safetensors).
    ReservedName,
    /// A metadata value is not a string.
    MetadataNotString {
        /// The metadata key.
        key: Box<str>,
    },
    /// A `sha256` digest is not 64 lowercase hexadecimal digits.
    InvalidDigest,
    /// The `alignment` field is not a power of two within the supported range.
    InvalidAlignment(u64),
    /// A field of the `encryption` section breaks a rule of `docs/FORMAT.md`
    /// section 10.
    InvalidEncryption {
        /// The field.
        what: &'static str,
    },
    /// A field of the `compression` section or a chunk table breaks a rule
    /// of `docs/FORMAT.md` section 15.
    InvalidCompression {
        /// The field.
        what: &'static str,
    },
    /// A crypto field of a cryptotensors file breaks a rule of
    /// `docs/FORMAT.md` section 12.
    InvalidCryptotensors {
        /// The field.
        what: &'static str,
    },
    /// A collection's manifest or block file breaks a rule of
    /// `docs/FORMAT.md` section 13.
    InvalidCollection {
        /// What is wrong, naming the field or block.
        message: Box<str>,
    },
    /// The signature block at the end of a signed file is malformed.
    InvalidSignatureBlock {
        /// What is wrong with it.
        what: &'static str,
    },
    /// The binary header of a bintensors file breaks a rule of
    /// `docs/FORMAT.md`, "bintensors files" (a varint, the metadata option
    /// tag, the padding).
    InvalidBintensors {
        /// The field.
        what: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The format cannot store this dtype (bintensors has 15 of ours).
    UnsupportedDtype {
        /// The dtype's name.
        dtype: &'static str,
        /// The format.
        format: &'static str,
    },
    /// A pickle (a torch checkpoint's `data.pkl`) the safe reader refuses:
    /// a name outside the allow list, an opcode it does not run, or a
    /// malformed instruction (docs/PICKLE.md).
    InvalidPickle {
        /// What is wrong, naming the global or the opcode.
        message: Box<str>,
    },
    /// A zip container (torch.save's) that breaks a rule of
    /// docs/PICKLE.md, "The zip container".
    InvalidZip {
        /// What is wrong, naming the member.
        message: Box<str>,
    },
    /// A numpy `.npy` array (alone or in an `.npz`) that breaks a rule of
    /// docs/PICKLE.md, "numpy files": an object array among them.
    InvalidNumpy {
        /// What is wrong.
        message: Box<str>,
    },
    /// A region (a start and a length in each dimension) that does not
    /// fit the tensor it selects from.
    InvalidRegion {
        /// What is wrong, naming the dimension.
        message: Box<str>,
    },
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Error {
        Error { kind, tensor: None, offset: None }
    }

    pub(crate) fn at(kind: ErrorKind, offset: u64) -> Error {
        Error { kind, tensor: None, offset: Some(offset) }
    }

    pub(crate) fn with_tensor(mut self, name: &str) -> Error {
        if self.tensor.is_none() {
            self.tensor = Some(name.into());
        }
        self
    }

    /// Sets the offset where the problem was found, unless one is set.
    pub(crate) fn at_offset(mut self, offset: u64) -> Error {
        if self.offset.is_none() {
            self.offset = Some(offset);
        }
        self
    }

    /// Moves the offset by `by` bytes (from header-relative to file-relative).
    pub(crate) fn shifted(mut self, by: u64) -> Error {
        self.offset = self.offset.map(|o| o.saturating_add(by));
        self
    }

    pub(crate) fn truncated(what: &'static str, needed: u64, available: u64) -> Error {
        Error::new(ErrorKind::Truncated { what, needed, available })
    }

    pub(crate) fn overflow(what: &'static str) -> Error {
        Error::new(ErrorKind::Overflow { what })
    }

    pub(crate) fn limit(what: &'static str, value: u64, limit: u64) -> Error {
        Error::new(ErrorKind::LimitExceeded { what, value, limit })
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }

    /// The tensor the error concerns, if any.
    pub fn tensor(&self) -> Option<&str> {
        self.tensor.as_deref()
    }

    /// The byte offset in the file where the problem was found, if known.
    pub fn offset(&self) -> Option<u64> {
        self.offset
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.tensor {
            write!(f, "tensor {name:?}: ")?;
        }
        fmt::Display::fmt(&self.kind, f)?;
        if let Some(offset) = self.offset {
            write!(f, " at byte {offset}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            Truncated { what, needed, available } => {
                write!(f, "truncated {what}: needs {needed} bytes, {available} available")
            }
            UnrecognizedFormat { looks_like: Some(what) } => {
                write!(f, "not a deathtensors, safetensors or bintensors file: it looks like {what}")
            }
            UnrecognizedFormat { looks_like: None } => {
                f.write_str("not a deathtensors, safetensors or bintensors file")
            }
            UnsupportedVersion(v) => write!(f, "unsupported deathtensors version {v}"),
            UnknownFlags(bits) => write!(f, "unknown flag bits {bits:#x}"),
            Unsupported { what } => write!(f, "{what} is not supported by this version"),
            LimitExceeded { what, value, limit } => {
                write!(f, "{what} {value} exceeds the limit of {limit}")
            }
            SafetensorsHeaderCap { len } => write!(
                f,
                "header length {len} exceeds safetensors' cap of {} bytes (about 1.2 million tensors), which \
                 safetensors refuses to read: write the file in the deathtensors format instead (deathtensors.save \
                 with format=\"deathtensors\", the default), whose header may reach {} bytes",
                crate::SAFETENSORS_MAX_HEADER,
                crate::Limits::DEFAULT_MAX_HEADER_LEN
            ),
            NonZeroPadding => f.write_str("padding between header and data is not zero"),
            InvalidUtf8 => f.write_str("header is not valid UTF-8"),
            InvalidJson { message } => write!(f, "header is not valid JSON: {message}"),
            WrongType { what, expected } => write!(f, "{what} must be {expected}"),
            DuplicateKey { within, key } => write!(f, "duplicate key {key:?} in {within}"),
            MissingField { field } => write!(f, "missing field {field:?}"),
            UnknownField { field } => write!(f, "unknown field {field:?}"),
            WrongFormatName => f.write_str("field \"format\" is not \"deathtensors\""),
            UnsupportedFormatVersion(v) => write!(f, "unsupported format_version {v}"),
            UnknownDtype(d) => write!(f, "unknown dtype {d:?}"),
            InvalidDimension => f.write_str("shape dimensions must be non-negative integers"),
            InvalidOffsets => f.write_str("data_offsets must be an array of two non-negative integers"),
            Overflow { what } => write!(f, "overflow computing {what}"),
            MisalignedSubByte => f.write_str("sub-byte dtype data does not end on a byte boundary"),
            OffsetsReversed { start, end } => {
                write!(f, "data_offsets reversed: start {start} > end {end}")
            }
            ByteLengthMismatch { expected, actual } => {
                write!(f, "data_offsets span {actual} bytes but dtype and shape need {expected}")
            }
            OffsetOutOfBounds { end, data_len, file_needed, file_len } => write!(
                f,
                "data ends at {end}, past the {data_len}-byte data blob: the file is truncated \
                 (its header needs {file_needed} bytes, it has {file_len})"
            ),
            Overlap { other } => write!(f, "data overlaps tensor {other:?}"),
            UnexpectedGap { expected, actual } => {
                write!(f, "data starts at {actual} but the layout puts it at {expected} (hole in the data blob)")
            }
            UnownedBytes { covered, data_len } => write!(
                f,
                "data blob is {data_len} bytes but tensors cover only {covered}: {} trailing bytes belong to no tensor",
                data_len.saturating_sub(*covered)
            ),
            EmptyName => f.write_str("empty tensor name"),
            ControlCharacterInName => f.write_str("tensor name contains a control character"),
            ReservedName => f.write_str("tensor name is reserved by the format"),
            MetadataNotString { key } => write!(f, "metadata value of {key:?} is not a string"),
            InvalidDigest => f.write_str("sha256 must be 64 lowercase hexadecimal digits"),
            InvalidAlignment(a) => {
                write!(f, "alignment {a} is not a power of two between 1 and {}", crate::limits::MAX_ALIGNMENT)
            }
            InvalidEncryption { what } => write!(f, "invalid encryption section: bad {what}"),
            InvalidCompression { what } => write!(f, "invalid compression section: bad {what}"),
            InvalidCryptotensors { what } => write!(f, "invalid cryptotensors field: bad {what}"),
            InvalidSignatureBlock { what } => write!(f, "invalid signature block: bad {what}"),
            InvalidCollection { message } => write!(f, "invalid collection: {message}"),
            InvalidBintensors { what, problem } => write!(f, "invalid bintensors header: {what} is {problem}"),
            UnsupportedDtype { dtype, format } => write!(f, "{format} files cannot store dtype {dtype}"),
            InvalidRegion { message } => write!(f, "invalid region: {message}"),
            InvalidPickle { message } => write!(f, "pickle refused: {message}"),
            InvalidZip { message } => write!(f, "invalid zip container: {message}"),
            InvalidNumpy { message } => write!(f, "invalid numpy array: {message}"),
        }
    }
}

impl core::error::Error for Error {}
