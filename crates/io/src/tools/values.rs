//! Decoding tensor elements to numbers, for stats, diff and `cat`: every
//! whole-byte dtype, including the 8-bit floats of the MX and FP8 formats.

use deathtensors_format::Dtype;

/// One element, decoded exactly (integers keep all their digits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A BOOL.
    Bool(bool),
    /// An unsigned integer.
    Unsigned(u64),
    /// A signed integer.
    Signed(i64),
    /// A real floating-point number.
    Float(f64),
    /// A complex number: real and imaginary parts.
    Complex(f64, f64),
}

/// What `stats` and `diff --atol` say about packed dtypes, whose elements
/// do not fill whole bytes.
pub const SUB_BYTE: &str = "not supported for packed sub-byte dtypes";

/// The bytes of one element, or `None` for the packed sub-byte dtypes (F4, F6).
pub fn element_size(dtype: Dtype) -> Option<usize> {
    dtype.bits().is_multiple_of(8).then_some((dtype.bits() / 8) as usize)
}

/// How many numbers one element decodes to: 2 for complex dtypes, else 1.
pub fn components(dtype: Dtype) -> usize {
    match dtype {
        Dtype::C64 | Dtype::C128 => 2,
        _ => 1,
    }
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&bytes[..N]);
    a
}

/// Appends the elements of `bytes` to `out` as `f64`s (two per complex
/// element: real, then imaginary). `bytes` holds whole elements; nothing is
/// appended for sub-byte dtypes.
pub fn decode(dtype: Dtype, bytes: &[u8], out: &mut Vec<f64>) {
    fn each<const N: usize>(bytes: &[u8], out: &mut Vec<f64>, f: impl Fn([u8; N]) -> f64) {
        out.extend(bytes.chunks_exact(N).map(|c| f(array(c))));
    }
    match dtype {
        Dtype::BOOL => each(bytes, out, |[b]| f64::from(u8::from(b != 0))),
        Dtype::U8 => each(bytes, out, |[b]| f64::from(b)),
        Dtype::I8 => each(bytes, out, |b| f64::from(i8::from_le_bytes(b))),
        Dtype::U16 => each(bytes, out, |b| f64::from(u16::from_le_bytes(b))),
        Dtype::I16 => each(bytes, out, |b| f64::from(i16::from_le_bytes(b))),
        Dtype::U32 => each(bytes, out, |b| f64::from(u32::from_le_bytes(b))),
        Dtype::I32 => each(bytes, out, |b| f64::from(i32::from_le_bytes(b))),
        Dtype::U64 => each(bytes, out, |b| u64::from_le_bytes(b) as f64),
        Dtype::I64 => each(bytes, out, |b| i64::from_le_bytes(b) as f64),
        Dtype::F16 => each(bytes, out, |b| half::f16::from_le_bytes(b).to_f64()),
        Dtype::BF16 => each(bytes, out, |b| half::bf16::from_le_bytes(b).to_f64()),
        Dtype::F32 | Dtype::C64 => each(bytes, out, |b| f64::from(f32::from_le_bytes(b))),
        Dtype::F64 | Dtype::C128 => each(bytes, out, f64::from_le_bytes),
        Dtype::F8_E4M3 => each(bytes, out, |[b]| f8_e4m3fn(b)),
        Dtype::F8_E5M2 => each(bytes, out, |[b]| f8_e5m2(b)),
        Dtype::F8_E8M0 => each(bytes, out, |[b]| f8_e8m0(b)),
        Dtype::F8_E4M3FNUZ => each(bytes, out, |[b]| f8_e4m3fnuz(b)),
        Dtype::F8_E5M2FNUZ => each(bytes, out, |[b]| f8_e5m2fnuz(b)),
        Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2 => {}
    }
}

/// Decodes one element from the start of `bytes`, which holds at least
/// [`element_size`] bytes. `None` for sub-byte dtypes.
pub fn value(dtype: Dtype, bytes: &[u8]) -> Option<Value> {
    Some(match dtype {
        Dtype::BOOL => Value::Bool(bytes[0] != 0),
        Dtype::U8 => Value::Unsigned(bytes[0].into()),
        Dtype::U16 => Value::Unsigned(u16::from_le_bytes(array(bytes)).into()),
        Dtype::U32 => Value::Unsigned(u32::from_le_bytes(array(bytes)).into()),
        Dtype::U64 => Value::Unsigned(u64::from_le_bytes(array(bytes))),
        Dtype::I8 => Value::Signed(i8::from_le_bytes(array(bytes)).into()),
        Dtype::I16 => Value::Signed(i16::from_le_bytes(array(bytes)).into()),
        Dtype::I32 => Value::Signed(i32::from_le_bytes(array(bytes)).into()),
        Dtype::I64 => Value::Signed(i64::from_le_bytes(array(bytes))),
        Dtype::F4 | Dtype::F6_E2M3 | Dtype::F6_E3M2 => return None,
        _ => {
            let mut out = Vec::with_capacity(2);
            decode(dtype, &bytes[..element_size(dtype)?], &mut out);
            match out[..] {
                [re, im] => Value::Complex(re, im),
                [x] => Value::Float(x),
                _ => return None,
            }
        }
    })
}

/// `2^e` for the small exponents of 8-bit floats.
fn pow2(e: i32) -> f64 {
    f64::powi(2.0, e)
}

/// The sign and magnitude of an 8-bit float with `mantissa_bits` and an
/// exponent bias, exponent 0 being subnormal. Special values (NaN, infinity)
/// are each format's own and are handled by the callers.
fn minifloat(b: u8, mantissa_bits: u32, bias: i32) -> (f64, f64) {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((b & 0x7f) >> mantissa_bits);
    let mantissa = f64::from(b & ((1 << mantissa_bits) - 1)) / f64::from(1u32 << mantissa_bits);
    let magnitude = if exponent == 0 { mantissa * pow2(1 - bias) } else { (1.0 + mantissa) * pow2(exponent - bias) };
    (sign, magnitude)
}

/// F8_E4M3 (E4M3FN, as in PyTorch's `float8_e4m3fn`): bias 7, no
/// infinities, NaN is S.1111.111; the largest finite value is 448.
pub fn f8_e4m3fn(b: u8) -> f64 {
    if b & 0x7f == 0x7f {
        return f64::NAN;
    }
    let (sign, magnitude) = minifloat(b, 3, 7);
    sign * magnitude
}

/// F8_E5M2: IEEE 754-like with bias 15, infinities and NaNs.
pub fn f8_e5m2(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    match b & 0x7f {
        0x7c => sign * f64::INFINITY,
        0x7d..=0x7f => f64::NAN,
        _ => sign * minifloat(b, 2, 15).1,
    }
}

/// F8_E8M0 (the MX scale): `2^(e - 127)`, no sign, 0xFF is NaN.
pub fn f8_e8m0(b: u8) -> f64 {
    if b == 0xff {
        return f64::NAN;
    }
    pow2(i32::from(b) - 127)
}

/// F8_E4M3FNUZ: bias 8, no infinities, no negative zero: 0x80 is the only NaN.
pub fn f8_e4m3fnuz(b: u8) -> f64 {
    if b == 0x80 {
        return f64::NAN;
    }
    let (sign, magnitude) = minifloat(b, 3, 8);
    sign * magnitude
}

/// F8_E5M2FNUZ: bias 16, no infinities, no negative zero: 0x80 is the only NaN.
pub fn f8_e5m2fnuz(b: u8) -> f64 {
    if b == 0x80 {
        return f64::NAN;
    }
    let (sign, magnitude) = minifloat(b, 2, 16);
    sign * magnitude
}

#[cfg(test)]
mod tests;
