//! Element types.

use core::fmt;

/// The element type of a tensor.
///
/// The variants are declared in the order safetensors 0.8 declares them,
/// and the derived `Ord` follows it: the safetensors encoder sorts tensors by
/// descending dtype with that order, and we reproduce its bytes.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dtype {
    /// Boolean, one byte per element (0 or 1).
    BOOL,
    /// 4-bit float (E2M1, as in MXFP4), two elements per byte.
    F4,
    /// 6-bit float E2M3 (MXFP6), packed.
    F6_E2M3,
    /// 6-bit float E3M2 (MXFP6), packed.
    F6_E3M2,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 8-bit integer.
    I8,
    /// 8-bit float E5M2.
    F8_E5M2,
    /// 8-bit float E4M3 (FN).
    F8_E4M3,
    /// 8-bit exponent-only scale E8M0 (MX formats).
    F8_E8M0,
    /// 8-bit float E4M3, finite with unsigned zero (FNUZ).
    F8_E4M3FNUZ,
    /// 8-bit float E5M2, finite with unsigned zero (FNUZ).
    F8_E5M2FNUZ,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// IEEE 754 single precision.
    F32,
    /// Complex number of two F32.
    C64,
    /// IEEE 754 double precision.
    F64,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
    /// Complex number of two F64.
    C128,
}

impl Dtype {
    /// Every dtype, in declaration order.
    pub const ALL: [Dtype; 23] = [
        Dtype::BOOL,
        Dtype::F4,
        Dtype::F6_E2M3,
        Dtype::F6_E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8_E5M2,
        Dtype::F8_E4M3,
        Dtype::F8_E8M0,
        Dtype::F8_E4M3FNUZ,
        Dtype::F8_E5M2FNUZ,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
        Dtype::C128,
    ];

    /// Size of one element in bits.
    pub const fn bits(self) -> u64 {
        match self {
            Dtype::F4 => 4,
            Dtype::F6_E2M3 | Dtype::F6_E3M2 => 6,
            Dtype::BOOL
            | Dtype::U8
            | Dtype::I8
            | Dtype::F8_E5M2
            | Dtype::F8_E4M3
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ => 8,
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
            Dtype::C128 => 128,
        }
    }

    /// The alignment in bytes the element type needs in memory (1 for
    /// sub-byte and byte types; a complex number aligns like its parts).
    pub const fn align(self) -> u64 {
        match self {
            Dtype::C64 => 4,
            Dtype::C128 => 8,
            d if d.bits() < 8 => 1,
            d => d.bits() / 8,
        }
    }

    /// Whether deathtensors 0.3.0 knows this dtype (its 15 types).
    pub const fn is_legacy(self) -> bool {
        !matches!(
            self,
            Dtype::F4
                | Dtype::F6_E2M3
                | Dtype::F6_E3M2
                | Dtype::F8_E5M2
                | Dtype::F8_E4M3
                | Dtype::F8_E8M0
                | Dtype::F8_E4M3FNUZ
                | Dtype::F8_E5M2FNUZ
        )
    }

    /// The dtype's name as written in headers (`"F32"`, `"BF16"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6_E2M3 => "F6_E2M3",
            Dtype::F6_E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8_E5M2 => "F8_E5M2",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E8M0 => "F8_E8M0",
            Dtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            Dtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
            Dtype::C128 => "C128",
        }
    }

    /// The dtype with this header name, if there is one. Names are
    /// case-sensitive, as in both formats.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Some(match name.as_bytes() {
            b"BOOL" => Dtype::BOOL,
            b"F4" => Dtype::F4,
            b"F6_E2M3" => Dtype::F6_E2M3,
            b"F6_E3M2" => Dtype::F6_E3M2,
            b"U8" => Dtype::U8,
            b"I8" => Dtype::I8,
            b"F8_E5M2" => Dtype::F8_E5M2,
            b"F8_E4M3" => Dtype::F8_E4M3,
            b"F8_E8M0" => Dtype::F8_E8M0,
            b"F8_E4M3FNUZ" => Dtype::F8_E4M3FNUZ,
            b"F8_E5M2FNUZ" => Dtype::F8_E5M2FNUZ,
            b"I16" => Dtype::I16,
            b"U16" => Dtype::U16,
            b"F16" => Dtype::F16,
            b"BF16" => Dtype::BF16,
            b"I32" => Dtype::I32,
            b"U32" => Dtype::U32,
            b"F32" => Dtype::F32,
            b"C64" => Dtype::C64,
            b"F64" => Dtype::F64,
            b"I64" => Dtype::I64,
            b"U64" => Dtype::U64,
            b"C128" => Dtype::C128,
            _ => return None,
        })
    }

    /// Bytes taken by `numel` elements, with safetensors' rule for sub-byte
    /// types: the bits must fill whole bytes.
    ///
    /// # Errors
    /// - `Overflow` if the size does not fit in a `u64`.
    /// - `MisalignedSubByte` if a sub-byte type does not end on a byte boundary.
    pub fn byte_len(self, numel: u64) -> crate::Result<u64> {
        let bits = numel.checked_mul(self.bits()).ok_or_else(|| crate::Error::overflow("tensor byte length"))?;
        if bits % 8 != 0 {
            return Err(crate::Error::new(crate::ErrorKind::MisalignedSubByte));
        }
        Ok(bits / 8)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
