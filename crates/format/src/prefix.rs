//! The fixed 24-byte prefix of a deathtensors v1 file.

use core::ops::BitOr;

use crate::reader::Reader;
use crate::{Error, ErrorKind, Result};

/// The first 8 bytes of every deathtensors file.
pub const MAGIC: [u8; 8] = *b"DTLEGION";

/// The only version of the prefix this crate reads and writes.
pub const VERSION: u32 = 1;

/// The feature bits of the prefix's flags field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(u32);

impl Flags {
    /// No feature.
    pub const EMPTY: Flags = Flags(0);
    /// Bit 0: the data blob is one zstd frame (as deathtensors 0.2 and 0.3 write it).
    pub const ZSTD: Flags = Flags(1);
    /// Bit 1: a 32-byte SHA-256 footer follows the data blob.
    pub const CHECKSUM: Flags = Flags(1 << 1);
    /// Bit 2: tensor data is encrypted in chunks (`docs/FORMAT.md` section 10).
    pub const ENCRYPTED: Flags = Flags(1 << 2);
    /// Bit 3: a block of Ed25519 signatures ends the file (section 11).
    pub const SIGNED: Flags = Flags(1 << 3);
    /// Bit 4: the header is encrypted too (section 10.8); only with bit 2.
    pub const SEALED: Flags = Flags(1 << 4);
    /// Bit 5: tensors are compressed one by one, in chunks (section 15).
    pub const COMPRESSED: Flags = Flags(1 << 5);
    const KNOWN: u32 = 0b11_1111;

    /// Flags from the raw field.
    ///
    /// # Errors
    /// `UnknownFlags` if a bit other than bits 0 to 5 is set: an old reader
    /// must refuse a feature it does not know rather than misread the file.
    pub fn from_bits(bits: u32) -> Result<Flags> {
        if bits & !Flags::KNOWN != 0 {
            return Err(Error::at(ErrorKind::UnknownFlags(bits & !Flags::KNOWN), 12));
        }
        Ok(Flags(bits))
    }

    /// The raw field.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` without the bits of `other`.
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

/// The decoded prefix: magic (checked), version, flags and header length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// The format version; always [`VERSION`] once parsed.
    pub version: u32,
    /// The feature flags.
    pub flags: Flags,
    /// The byte length of the JSON header that follows.
    pub header_len: u64,
}

impl Prefix {
    /// Length of the prefix in bytes.
    pub const LEN: usize = 24;

    /// Decodes the first 24 bytes of a deathtensors file.
    ///
    /// # Errors
    /// - `Truncated` if fewer than 24 bytes are given.
    /// - `UnrecognizedFormat` if the magic is not `DTLEGION`.
    /// - `UnsupportedVersion`, `UnknownFlags` for a version or flags this
    ///   crate does not know.
    pub fn parse(bytes: &[u8]) -> Result<Prefix> {
        let mut r = Reader::new(bytes);
        if r.array::<8>("magic")? != MAGIC {
            return Err(Error::new(ErrorKind::UnrecognizedFormat { looks_like: crate::sniff::sniff(bytes) }));
        }
        let version = r.u32_le("version")?;
        if version != VERSION {
            return Err(Error::at(ErrorKind::UnsupportedVersion(version), 8));
        }
        let flags = Flags::from_bits(r.u32_le("flags")?)?;
        let header_len = r.u64_le("header length")?;
        Ok(Prefix { version, flags, header_len })
    }

    /// Encodes the prefix.
    pub fn encode(&self) -> [u8; Prefix::LEN] {
        let mut out = [0u8; Prefix::LEN];
        out[..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&self.version.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.bits().to_le_bytes());
        out[16..].copy_from_slice(&self.header_len.to_le_bytes());
        out
    }
}
