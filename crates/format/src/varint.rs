//! bincode 2's variable-length unsigned integers (its `standard()`
//! configuration), as bintensors files store every count, length, dimension
//! and offset; and bincode's decode budget, which bintensors' reader enforces.

use alloc::vec::Vec;

use crate::reader::Reader;
use crate::{Error, ErrorKind, Result};

/// A value up to this is one byte; the tags above it announce wider forms.
const MAX_SINGLE: u8 = 250;
/// Tag of a u16 little-endian value.
const TAG_U16: u8 = 251;
/// Tag of a u32 little-endian value.
const TAG_U32: u8 = 252;
/// Tag of a u64 little-endian value.
const TAG_U64: u8 = 253;
/// Tag of a u128 value: no field of a bintensors header can hold one.
const TAG_U128: u8 = 254;

/// Reads one varint. Only the shortest form of each value is accepted:
/// bincode writes nothing else, so a longer form was made by hand, and one
/// value with several spellings would let two readers see different bytes
/// as the same header.
///
/// # Errors
/// `Truncated` if the bytes end inside it; `InvalidBintensors` for the
/// u128 tag, the reserved tag 255, or a form longer than needed.
pub(crate) fn read(r: &mut Reader<'_>, what: &'static str) -> Result<u64> {
    let at = r.pos() as u64;
    let tag = r.u8(what)?;
    let (value, min) = match tag {
        0..=MAX_SINGLE => return Ok(u64::from(tag)),
        TAG_U16 => (u64::from(r.u16_le(what)?), u64::from(MAX_SINGLE) + 1),
        TAG_U32 => (u64::from(r.u32_le(what)?), u64::from(u16::MAX) + 1),
        TAG_U64 => (r.u64_le(what)?, u64::from(u32::MAX) + 1),
        TAG_U128 => return Err(invalid(what, "a 128-bit varint (tag 0xfe)", at)),
        _ => return Err(invalid(what, "the reserved varint tag 0xff", at)),
    };
    if value < min {
        return Err(invalid(what, "a varint longer than its shortest form (bincode writes the shortest)", at));
    }
    Ok(value)
}

/// Appends the shortest varint of `v`.
pub(crate) fn write(out: &mut Vec<u8>, v: u64) {
    if v <= u64::from(MAX_SINGLE) {
        out.push(v as u8);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(TAG_U16);
        out.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(TAG_U32);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(TAG_U64);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn invalid(what: &'static str, problem: &'static str, at: u64) -> Error {
    Error::at(ErrorKind::InvalidBintensors { what, problem }, at)
}

/// bincode's decode limit as bintensors configures it
/// (`config::standard().with_limit::<100_000_000>()`).
pub(crate) const BUDGET: u64 = 100_000_000;

/// bincode's decode budget: not a count of bytes read but of memory the
/// decoded value claims. Each integer claims its size in memory (a u8 1, a
/// u32 4, a u64 or usize 8, however short its varint), a string its length,
/// and a list claims `count * size_of::<element>()` before its first element
/// and gives one element's size back as each element begins. A file whose
/// claims ever pass [`BUDGET`] is refused by bintensors, so by us too; sizes
/// are those of the 64-bit targets bintensors ships for.
pub(crate) struct Claims {
    claimed: u64,
}

impl Claims {
    pub(crate) fn new() -> Claims {
        Claims { claimed: 0 }
    }

    /// Claims `n` more bytes of the budget.
    ///
    /// # Errors
    /// `LimitExceeded` if the claims pass the budget.
    pub(crate) fn claim(&mut self, n: u64) -> Result<()> {
        let total = self.claimed.checked_add(n).filter(|&t| t <= BUDGET);
        match total {
            Some(t) => {
                self.claimed = t;
                Ok(())
            }
            None => Err(Error::limit("bincode decode budget", self.claimed.saturating_add(n), BUDGET)),
        }
    }

    /// Claims a list of `count` elements of `size` bytes each.
    pub(crate) fn claim_list(&mut self, count: u64, size: u64) -> Result<()> {
        match count.checked_mul(size) {
            Some(n) => self.claim(n),
            None => Err(Error::limit("bincode decode budget", u64::MAX, BUDGET)),
        }
    }

    /// Gives back one list element's claim as the element begins.
    pub(crate) fn release(&mut self, size: u64) {
        self.claimed = self.claimed.saturating_sub(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(bytes: &[u8], expected: Option<u64>) {
        let mut r = Reader::new(bytes);
        match (read(&mut r, "value"), expected) {
            (Ok(v), Some(e)) => {
                assert_eq!(v, e);
                assert_eq!(r.remaining(), 0);
                let mut out = Vec::new();
                write(&mut out, v);
                assert_eq!(out, bytes, "not the shortest form of {v}");
            }
            (Err(_), None) => {}
            (got, want) => panic!("{bytes:02x?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn forms() {
        check(&[0], Some(0));
        check(&[250], Some(250));
        check(&[251, 251, 0], Some(251));
        check(&[251, 0xff, 0xff], Some(65535));
        check(&[252, 0, 0, 1, 0], Some(65536));
        check(&[252, 0xff, 0xff, 0xff, 0xff], Some(u32::MAX as u64));
        check(&[253, 0, 0, 0, 0, 1, 0, 0, 0], Some(1 << 32));
        check(&[253, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], Some(u64::MAX));
        // Longer than needed, the u128 and reserved tags, truncated.
        check(&[251, 5, 0], None);
        check(&[252, 0xff, 0xff, 0, 0], None);
        check(&[253, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], None);
        check(&[254, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], None);
        check(&[255], None);
        check(&[251, 0], None);
        check(&[], None);
    }

    #[test]
    fn budget() {
        let mut c = Claims::new();
        c.claim(BUDGET - 1).unwrap();
        c.claim(1).unwrap();
        assert!(c.claim(1).is_err());
        c.release(8);
        c.claim(8).unwrap();
        assert!(c.claim_list(u64::MAX, 72).is_err());
    }
}
