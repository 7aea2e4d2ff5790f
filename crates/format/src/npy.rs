//! numpy's `.npy` arrays (docs/PICKLE.md, "numpy files"), alone or as the
//! members of an `.npz`: the magic, the version, and the header, a Python
//! dict literal read by a parser of literals only (strings, integers,
//! `True`/`False`, tuples), never evaluated. Object arrays, whose elements
//! are pickles, are refused, as are structured, string and date arrays.
//!
//! Sans-IO: the file's first bytes in, the array's dtype, shape, layout and
//! where its data lies out; the caller checks that the data is there.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::{Dtype, Error, ErrorKind, Result};

/// The magic of every `.npy` file.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The longest header read: numpy's own reader refuses more than 10,000
/// bytes unless told otherwise; this allows the longest a plain array of
/// up to 64 dimensions can need several times over.
pub const MAX_HEADER_LEN: usize = 65_536;

/// The most dimensions an array may have (numpy's own limit).
pub const MAX_DIMS: usize = 64;

/// A parsed `.npy` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Npy {
    /// The element type.
    pub dtype: Dtype,
    /// The shape, in row-major (C) terms whatever the layout.
    pub shape: Vec<u64>,
    /// Whether the data is in column-major (Fortran) order.
    pub fortran_order: bool,
    /// Whether the elements are big-endian (`>` in the descr).
    pub big_endian: bool,
    /// Where the data starts: after the magic, version, length and header.
    pub data_start: u64,
    /// The data's length in bytes (elements times their size).
    pub data_len: u64,
}

fn bad(message: String) -> Error {
    Error::new(ErrorKind::InvalidNumpy { message: message.into_boxed_str() })
}

/// Whether `file` starts with the `.npy` magic.
pub fn is_npy(file: &[u8]) -> bool {
    file.starts_with(MAGIC)
}

impl Npy {
    /// Reads the header at the start of `file` (at least the magic,
    /// version, length and header: the data need not follow).
    ///
    /// # Errors
    /// `InvalidNumpy` naming what is refused: the magic, the version, a
    /// header longer than [`MAX_HEADER_LEN`] or cut short, a literal that
    /// is not one, a missing or extra key, an object, structured or other
    /// unsupported descr, a shape that overflows.
    pub fn parse(file: &[u8]) -> Result<Npy> {
        if !is_npy(file) {
            return Err(bad("no .npy magic (\\x93NUMPY)".into()));
        }
        let (major, minor) = (file.get(6).copied(), file.get(7).copied());
        let (len, at) = match major {
            Some(1) => (file.get(8..10).map(|b| usize::from(u16::from_le_bytes([b[0], b[1]]))), 10usize),
            Some(2 | 3) => (file.get(8..12).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize), 12),
            Some(v) => {
                return Err(bad(format!("version {v}.{} is not one numpy writes (1, 2 or 3)", minor.unwrap_or(0))))
            }
            None => return Err(bad("the file ends inside its version".into())),
        };
        let len = len.ok_or_else(|| bad("the file ends inside its header length".into()))?;
        if len > MAX_HEADER_LEN {
            return Err(bad(format!("a {len}-byte header, more than the {MAX_HEADER_LEN} read")));
        }
        let header = file.get(at..at + len).ok_or_else(|| bad(format!("the {len}-byte header is cut short")))?;
        let text = core::str::from_utf8(header).map_err(|_| bad("the header is not text".into()))?;
        if matches!(major, Some(1 | 2)) && !text.is_ascii() {
            return Err(bad("a version 1 or 2 header that is not ASCII".into()));
        }
        let dict = Parser { s: text.as_bytes(), at: 0, depth: 0 }.document()?;
        let Literal::Dict(entries) = dict else {
            return Err(bad("the header is not a dict".into()));
        };
        let mut descr = None;
        let mut fortran = None;
        let mut shape = None;
        for (key, value) in entries {
            let slot = match key.as_str() {
                "descr" => &mut descr,
                "fortran_order" => &mut fortran,
                "shape" => &mut shape,
                other => return Err(bad(format!("the header has a key {other:?} numpy does not write"))),
            };
            if slot.replace(value).is_some() {
                return Err(bad(format!("the header names {key:?} twice")));
            }
        }
        let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
            return Err(bad("the header lacks descr, fortran_order or shape".into()));
        };
        let (dtype, big_endian) = match descr {
            Literal::Str(d) => dtype_of(&d)?,
            Literal::List | Literal::Tuple(_) => {
                return Err(bad("a structured array (a record descr) is not read".into()));
            }
            _ => return Err(bad("descr is not a string".into())),
        };
        let Literal::Bool(fortran_order) = fortran else {
            return Err(bad("fortran_order is not True or False".into()));
        };
        let Literal::Tuple(dims) = shape else {
            return Err(bad("shape is not a tuple".into()));
        };
        if dims.len() > MAX_DIMS {
            return Err(bad(format!("{} dimensions, more than {MAX_DIMS}", dims.len())));
        }
        let shape = dims
            .into_iter()
            .map(|d| match d {
                Literal::Int(n) => Ok(n),
                _ => Err(bad("shape holds something other than integers".into())),
            })
            .collect::<Result<Vec<u64>>>()?;
        let numel = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let data_len = numel
            .and_then(|n| n.checked_mul(dtype.bits() / 8))
            .ok_or_else(|| bad(format!("shape {shape:?} overflows")))?;
        Ok(Npy { dtype, shape, fortran_order, big_endian, data_start: (at + len) as u64, data_len })
    }
}

/// The dtype of a descr (`<f4`, `|b1`, `>i8`, ...) and whether it is
/// big-endian.
fn dtype_of(descr: &str) -> Result<(Dtype, bool)> {
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
        _ => ("", descr),
    };
    if code.starts_with('O') {
        return Err(bad(format!(
            "an object array (descr {descr:?}): its elements are pickles, which are never loaded"
        )));
    }
    let dtype = match code {
        "b1" => Dtype::BOOL,
        "i1" => Dtype::I8,
        "u1" => Dtype::U8,
        "i2" => Dtype::I16,
        "u2" => Dtype::U16,
        "f2" => Dtype::F16,
        "i4" => Dtype::I32,
        "u4" => Dtype::U32,
        "f4" => Dtype::F32,
        "c8" => Dtype::C64,
        "i8" => Dtype::I64,
        "u8" => Dtype::U64,
        "f8" => Dtype::F64,
        "c16" => Dtype::C128,
        _ => {
            return Err(bad(format!(
                "descr {descr:?} has no dtype here (strings, dates, records and long doubles are not read)"
            )))
        }
    };
    let big_endian = match order {
        ">" => dtype.bits() > 8,
        "<" | "|" => false,
        // numpy writes `<`, `>` or `|`; "native" is not a byte order.
        _ => return Err(bad(format!("descr {descr:?} has no explicit byte order"))),
    };
    Ok((dtype, big_endian))
}

/// The literals a `.npy` header holds.
#[derive(Debug)]
enum Literal {
    Str(String),
    Int(u64),
    Bool(bool),
    Tuple(Vec<Literal>),
    /// A list: only ever a structured descr, which is refused.
    List,
    Dict(Vec<(String, Literal)>),
}

/// A parser of Python literals: nothing is evaluated.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
}

/// Nesting beyond this is refused (a plain header nests two deep).
const MAX_DEPTH: usize = 8;

impl Parser<'_> {
    fn document(mut self) -> Result<Literal> {
        let v = self.value()?;
        self.space();
        if self.at != self.s.len() {
            return Err(bad(format!("the header goes on after its dict, at byte {}", self.at)));
        }
        Ok(v)
    }

    fn space(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.s.get(self.at).copied()
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(bad(format!("the header wants {:?} at byte {}", c as char, self.at)))
        }
    }

    fn value(&mut self) -> Result<Literal> {
        match self.peek() {
            Some(b'{') => self.nested(|p| p.dict()),
            Some(b'(') => self.nested(|p| p.sequence(b')').map(Literal::Tuple)),
            Some(b'[') => self.nested(|p| p.sequence(b']').map(|_| Literal::List)),
            Some(b'\'' | b'"') => self.string().map(Literal::Str),
            Some(b'0'..=b'9') => self.int(),
            Some(b'T' | b'F') => self.word(),
            _ => Err(bad(format!("the header holds something other than a literal at byte {}", self.at))),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Literal>) -> Result<Literal> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(bad(format!("the header nests more than {MAX_DEPTH} deep")));
        }
        self.at += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn dict(&mut self) -> Result<Literal> {
        let mut entries = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.at += 1;
                return Ok(Literal::Dict(entries));
            }
            let Literal::Str(key) = self.value()? else {
                return Err(bad("a header key that is not a string".into()));
            };
            self.expect(b':')?;
            entries.push((key, self.value()?));
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {}
                _ => return Err(bad(format!("the header's dict is malformed at byte {}", self.at))),
            }
        }
    }

    fn sequence(&mut self, close: u8) -> Result<Vec<Literal>> {
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.at += 1;
                return Ok(items);
            }
            items.push(self.value()?);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(c) if c == close => {}
                _ => return Err(bad(format!("a sequence of the header is malformed at byte {}", self.at))),
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        let quote = self.s[self.at];
        let start = self.at + 1;
        let len = self.s[start..].iter().position(|&c| c == quote || c == b'\\');
        match len.map(|n| (n, self.s[start + n])) {
            Some((n, c)) if c == quote => {
                self.at = start + n + 1;
                // The header was checked to be UTF-8, and quotes are ASCII.
                Ok(core::str::from_utf8(&self.s[start..start + n]).unwrap_or_default().to_string())
            }
            Some(_) => Err(bad("a header string with an escape (numpy writes none)".into())),
            None => Err(bad("a header string is never closed".into())),
        }
    }

    fn int(&mut self) -> Result<Literal> {
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&c @ b'0'..=b'9') = self.s.get(self.at) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(c - b'0')))
                .ok_or_else(|| bad(format!("an integer of the header overflows at byte {start}")))?;
            self.at += 1;
        }
        // numpy 1.x wrote Python 2 longs in old files: `3L`.
        if self.s.get(self.at) == Some(&b'L') {
            self.at += 1;
        }
        Ok(Literal::Int(n))
    }

    fn word(&mut self) -> Result<Literal> {
        for (w, v) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s[self.at..].starts_with(w) {
                self.at += w.len();
                return Ok(Literal::Bool(v));
            }
        }
        Err(bad(format!("the header holds a name at byte {} (only True and False are read)", self.at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(header: &str) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend([1, 0]);
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out
    }

    #[test]
    fn reads_what_numpy_writes() {
        let a = Npy::parse(&npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n")).unwrap();
        assert_eq!(
            (a.dtype, a.shape.as_slice(), a.fortran_order, a.big_endian),
            (Dtype::F32, &[3, 4][..], false, false)
        );
        assert_eq!(a.data_len, 48);
        let b = Npy::parse(&npy("{'descr': '>i8', 'fortran_order': True, 'shape': (5,), }\n")).unwrap();
        assert_eq!((b.dtype, b.shape.as_slice(), b.fortran_order, b.big_endian), (Dtype::I64, &[5][..], true, true));
        let s = Npy::parse(&npy("{'descr': '|b1', 'fortran_order': False, 'shape': (), }\n")).unwrap();
        assert_eq!((s.dtype, s.shape.len(), s.data_len), (Dtype::BOOL, 0, 1));
        let e = Npy::parse(&npy("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 7), }\n")).unwrap();
        assert_eq!(e.data_len, 0);
    }

    #[test]
    fn refuses_objects_records_and_malformed_headers() {
        let refused = |h: &str, says: &str| {
            let e = Npy::parse(&npy(h)).unwrap_err().to_string();
            assert!(e.contains(says), "{h}: {e}");
        };
        refused("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "an object array");
        refused("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", "structured");
        refused("{'descr': '<U10', 'fortran_order': False, 'shape': (2,), }", "strings");
        refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", "key \"x\"");
        refused("{'descr': '<f4', 'fortran_order': False}", "lacks");
        refused("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "fortran_order");
        refused("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 9999999)}", "overflows");
        refused("{'descr': __import__('os'), 'fortran_order': False, 'shape': (2,)}", "other than a literal");
        refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} extra", "goes on");
        refused("((((((((((1))))))))))", "nests");
        refused("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}", "overflows");
        assert!(Npy::parse(b"\x93NUMPY\x01\x00\xff\x00{").unwrap_err().to_string().contains("cut short"));
        assert!(Npy::parse(b"\x93NUMPY\x09\x00").unwrap_err().to_string().contains("version 9"));
        assert!(Npy::parse(b"PK").unwrap_err().to_string().contains("magic"));
    }
}
