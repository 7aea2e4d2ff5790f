//! JSON decoding of both header formats.
//!
//! Headers in the form writers produce are decoded by the fast path in
//! `fast`; the full decoder here takes every other header, and reports the
//! problem of every invalid one.
//!
//! The full decoder works in one pass of serde visitors driven by simd-json
//! (with `std`, for headers up to 4 MiB) or serde_json (without, and for
//! longer headers: it streams, so a hostile header is refused at its first
//! bad value, with memory bounded by what the visitors keep). The visitors
//! see every key of every object, duplicates included, and stop at the
//! first problem. Serde errors carry only text, so a visitor that finds a
//! problem stores the typed [`Error`] in a slot shared by all visitors of
//! one parse and returns an empty serde error to unwind; the entry point
//! then prefers the slot.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::cell::Cell;
use core::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};

use crate::raw::RawHeader;
use crate::tensor::{Format, Metadata, TensorInfo};
use crate::tree::{Tree, MAX_DEPTH};
use crate::{Dtype, Error, ErrorKind, Limits, Result};

/// Decodes the JSON text of a header of either format, without the layout
/// checks (those need every tensor and live in `layout`).
///
/// Headers in the form writers produce take the fast path (`fast`); the
/// others, and every invalid one, the full decoder below.
pub(crate) fn parse(json: &[u8], format: Format, limits: &Limits, fork: &dyn crate::Fork) -> Result<RawHeader> {
    let text = match core::str::from_utf8(json) {
        Ok(text) => text,
        Err(e) => return Err(Error::at(ErrorKind::InvalidUtf8, e.valid_up_to() as u64)),
    };
    // The fast path refuses every raw control character (see below).
    if let Some(raw) = crate::fast::parse(text, format, limits, fork) {
        // Whatever the fast path accepts, the full decoder must accept with
        // the same result: checked wherever debug assertions are on (tests,
        // fuzzing).
        debug_assert!(
            matches!(parse_full(json, format, limits), Ok(ref full) if *full == raw),
            "the fast path accepted a header the full decoder decodes differently"
        );
        debug_assert!(raw.tensors.iter().all(|t| t.name.sealed()), "the fast path left a name unsealed");
        return Ok(raw);
    }
    // Raw control characters are invalid anywhere in JSON (in strings they
    // must be escaped; outside, only space, tab, CR and LF are whitespace).
    // Checked here so both backends agree: simd-json lets a NUL pass after
    // a number.
    if let Some(i) = first_control(json) {
        let message = alloc::format!("control character {:#04x} outside an escape", json[i]);
        return Err(Error::at(ErrorKind::InvalidJson { message: message.into() }, i as u64));
    }
    parse_full(json, format, limits)
}

/// Whether `b` is a control character that JSON allows nowhere raw.
fn is_control(b: u8) -> bool {
    b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')
}

/// The index of the first control character (other than JSON's whitespace)
/// in `json`. Eight bytes at a time: words with no byte below 0x20 (all of
/// them, in the headers writers produce) are skipped with one test.
fn first_control(json: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let mut words = json.chunks_exact(8);
    for (k, word) in words.by_ref().enumerate() {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let v = u64::from_le_bytes(eight);
        // Exact for "some byte is below 0x20"; whitespace is told apart below.
        if v.wrapping_sub(ONES * 0x20) & !v & HIGH != 0 {
            if let Some(i) = word.iter().position(|&b| is_control(b)) {
                return Some(k * 8 + i);
            }
        }
    }
    let rest = words.remainder();
    rest.iter().position(|&b| is_control(b)).map(|i| json.len() - rest.len() + i)
}

/// The full decoder: serde visitors that see every key and value and
/// report the first problem. `json` is valid UTF-8.
fn parse_full(json: &[u8], format: Format, limits: &Limits) -> Result<RawHeader> {
    let slot = Cell::new(None);
    let ctx = Ctx { limits, slot: &slot, json_len: json.len() };
    let result = backend::parse(json, Top { ctx, format });
    match (result, slot.take()) {
        (_, Some(err)) => Err(err),
        (Ok(raw), None) => Ok(raw),
        (Err(message), None) => Err(Error::new(ErrorKind::InvalidJson { message: message.into() })),
    }
}

#[cfg(feature = "std")]
mod backend {
    use super::Top;
    use crate::raw::RawHeader;
    use alloc::string::{String, ToString};
    use serde::de::DeserializeSeed;

    /// Headers longer than this are decoded by serde_json, which streams:
    /// simd-json first builds a tape of every value, 10 to 30 times the
    /// text for dense JSON (a header of nested or long arrays, rejected only
    /// once the tape is built), where streaming stops at the first value a
    /// visitor refuses. Below it the tape stays small.
    const STREAM_ABOVE: usize = 4 << 20;

    pub(super) fn parse(json: &[u8], top: Top<'_>) -> Result<RawHeader, String> {
        if json.len() > STREAM_ABOVE {
            let mut de = serde_json::Deserializer::from_slice(json);
            let raw = top.deserialize(&mut de).map_err(|e| e.to_string())?;
            de.end().map_err(|e| e.to_string())?;
            return Ok(raw);
        }
        check_surrogates(json)?;
        // simd-json unescapes strings in place, so it needs its own copy.
        let mut buf = json.to_vec();
        let mut de = simd_json::Deserializer::from_slice(&mut buf).map_err(|e| e.to_string())?;
        top.deserialize(&mut de).map_err(|e| e.to_string())
    }

    /// Refuses a high surrogate escape (`\ud800`) that no low surrogate
    /// escape follows, as serde_json does: simd-json decodes it as U+0000,
    /// silently changing the text.
    /// See: <https://github.com/simd-lite/simd-json/issues/481>
    fn check_surrogates(json: &[u8]) -> Result<(), String> {
        let hex = |at: usize| -> Option<u16> {
            let digits = json.get(at..at.checked_add(4)?)?;
            digits.iter().try_fold(0u16, |acc, &c| Some(acc << 4 | char::from(c).to_digit(16)? as u16))
        };
        // Outside strings a backslash is a syntax error that simd-json
        // reports; inside, each one starts an escape, which we skip whole.
        let mut i = 0;
        while let Some(pos) = json.get(i..).and_then(|rest| find_byte(rest, b'\\')) {
            let at = i + pos;
            i = match json.get(at + 1) {
                Some(b'u') if matches!(hex(at + 2), Some(0xD800..=0xDBFF)) => {
                    let low = json.get(at + 6..at + 8) == Some(b"\\u") && matches!(hex(at + 8), Some(0xDC00..=0xDFFF));
                    if !low {
                        return Err(alloc::format!("lone leading surrogate in hex escape at byte {at}"));
                    }
                    at + 12
                }
                Some(b'u') => at + 6,
                _ => at + 2,
            };
        }
        Ok(())
    }

    /// The index of the first `needle` in `haystack`. Headers rarely hold
    /// the byte looked for, so whole blocks are tested without branching
    /// per byte (the test vectorizes), and only the block that holds it is
    /// searched byte by byte.
    fn find_byte(haystack: &[u8], needle: u8) -> Option<usize> {
        const BLOCK: usize = 64;
        let mut blocks = haystack.chunks_exact(BLOCK);
        let mut at = 0;
        for block in blocks.by_ref() {
            if block.iter().fold(false, |found, &b| found | (b == needle)) {
                return block.iter().position(|&b| b == needle).map(|i| at + i);
            }
            at += BLOCK;
        }
        blocks.remainder().iter().position(|&b| b == needle).map(|i| at + i)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn find_byte_agrees_with_position() {
            for len in [0, 1, 63, 64, 65, 127, 128, 200] {
                let mut hay = alloc::vec![b'a'; len];
                assert_eq!(super::find_byte(&hay, b'\\'), None);
                for at in 0..len {
                    hay[at] = b'\\';
                    assert_eq!(super::find_byte(&hay, b'\\'), Some(at), "len {len} at {at}");
                    hay[at + 1..].fill(b'\\');
                    assert_eq!(super::find_byte(&hay, b'\\'), Some(at));
                    hay.fill(b'a');
                }
            }
        }
    }
}

#[cfg(not(feature = "std"))]
mod backend {
    use super::Top;
    use crate::raw::RawHeader;
    use alloc::string::{String, ToString};
    use serde::de::DeserializeSeed;

    pub(super) fn parse(json: &[u8], top: Top<'_>) -> Result<RawHeader, String> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let raw = top.deserialize(&mut de).map_err(|e| e.to_string())?;
        de.end().map_err(|e| e.to_string())?;
        Ok(raw)
    }
}

/// What every visitor of one parse shares.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    limits: &'a Limits,
    slot: &'a Cell<Option<Error>>,
    /// Length of the JSON text, to bound allocations made from size hints.
    json_len: usize,
}

/// Fewer bytes than any tensor entry takes in JSON
/// (`"a":{"dtype":"U8","shape":[],"data_offsets":[0,0]}` takes 50).
const MIN_TENSOR_JSON: usize = 32;

impl Ctx<'_> {
    /// How many tensors to reserve room for, given a map's size hint: the
    /// hint (exact with simd-json), bounded by what the input can hold and
    /// by the tensor limit, so a hint never allocates much more than the
    /// input's length.
    fn capacity(self, hint: Option<usize>) -> usize {
        let max = usize::try_from(self.limits.max_tensors).unwrap_or(usize::MAX);
        hint.unwrap_or(0).min(self.json_len / MIN_TENSOR_JSON + 1).min(max)
    }

    /// Records `err` (the first error wins) and returns a serde error to unwind with.
    fn fail<E: de::Error>(self, err: Error) -> E {
        let old = self.slot.take();
        self.slot.set(Some(old.unwrap_or(err)));
        E::custom("")
    }

    fn fail_kind<E: de::Error>(self, kind: ErrorKind) -> E {
        self.fail(Error::new(kind))
    }

    fn wrong_type<E: de::Error>(self, what: &'static str, expected: &'static str) -> E {
        self.fail_kind(ErrorKind::WrongType { what, expected })
    }

    /// Attaches the tensor's name to the recorded error, if there is one.
    fn annotate(self, name: &str) {
        if let Some(err) = self.slot.take() {
            self.slot.set(Some(err.with_tensor(name)));
        }
    }
}

/// Implements every non-matching `visit_*` of a visitor as a `WrongType`
/// error, so that a value of the wrong JSON type gets a typed error whatever
/// the backend.
macro_rules! reject_others {
    ($what:expr, $expected:expr; $($method:ident($ty:ty)),*) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> core::result::Result<Self::Value, E> {
            Err(self.ctx.wrong_type($what, $expected))
        })*
    };
}

macro_rules! reject_non_string {
    ($what:expr, $expected:expr) => {
        reject_others!($what, $expected; visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64));
        fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
            Err(self.ctx.wrong_type($what, $expected))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<Self::Value, A::Error> {
            Err(self.ctx.wrong_type($what, $expected))
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> core::result::Result<Self::Value, A::Error> {
            Err(self.ctx.wrong_type($what, $expected))
        }
    };
}

/// Implements every non-object `visit_*` of a visitor as a `WrongType`
/// error.
macro_rules! reject_non_object {
    ($what:expr, $expected:expr) => {
        reject_others!($what, $expected; visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_str(&str));
        fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
            Err(self.ctx.wrong_type($what, $expected))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<Self::Value, A::Error> {
            Err(self.ctx.wrong_type($what, $expected))
        }
    };
}

/// An object key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }

    fn into_string(self) -> String {
        match self {
            Key::Borrowed(s) => s.to_string(),
            Key::Owned(s) => s,
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> core::result::Result<Key<'de>, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> core::result::Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> core::result::Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> core::result::Result<Key<'de>, E> {
        Ok(Key::Owned(v))
    }
}

/// `DeserializeSeed` for a seed that is also the `Visitor` of any value it
/// reads (every seed here but the keys'): it asks serde for any value and
/// visits it itself.
macro_rules! seed_is_its_own_visitor {
    ($seed:ident<$($lt:lifetime),*> => $value:ty) => {
        impl<'de> DeserializeSeed<'de> for $seed<$($lt),*> {
            type Value = $value;
            fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> core::result::Result<$value, D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

/// The whole header object.
struct Top<'a> {
    ctx: Ctx<'a>,
    format: Format,
}

seed_is_its_own_visitor!(Top<'_> => RawHeader);

impl<'de> Visitor<'de> for Top<'_> {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> core::result::Result<RawHeader, A::Error> {
        match self.format {
            Format::Deathtensors => deathtensors_top(self.ctx, map),
            // bintensors headers are not JSON: `Header::parse` never sends
            // them here. Should one come, it is read with safetensors' rules.
            Format::Safetensors | Format::Bintensors => safetensors_top(self.ctx, map),
        }
    }

    reject_non_object!("header", "a JSON object");
}

fn duplicate<E: de::Error>(ctx: Ctx<'_>, within: &'static str, key: &str) -> E {
    ctx.fail_kind(ErrorKind::DuplicateKey { within, key: key.into() })
}

fn deathtensors_top<'de, A: MapAccess<'de>>(ctx: Ctx<'_>, mut map: A) -> core::result::Result<RawHeader, A::Error> {
    let mut format_seen = false;
    let mut version_seen = false;
    let mut created_by: Option<String> = None;
    let mut alignment: Option<u64> = None;
    let mut metadata: Option<Metadata> = None;
    let mut tensors: Option<Vec<TensorInfo>> = None;
    let mut encryption: Option<crate::crypt::Encryption> = None;
    let mut compression: Option<crate::compression::RawCompression> = None;
    while let Some(key) = map.next_key_seed(KeySeed)? {
        match key.as_str() {
            "compression" => {
                if compression.is_some() {
                    return Err(duplicate(ctx, "header", "compression"));
                }
                compression = Some(map.next_value_seed(CompressionSeed { ctx })?);
            }
            "encryption" => {
                if encryption.is_some() {
                    return Err(duplicate(ctx, "header", "encryption"));
                }
                let tree = map.next_value_seed(TreeSeed { ctx, within: "encryption", depth: 0 })?;
                encryption = Some(crate::crypt::decode(&tree).map_err(|e| ctx.fail(e))?);
            }
            "format" => {
                if format_seen {
                    return Err(duplicate(ctx, "header", "format"));
                }
                format_seen = true;
                let name = map.next_value_seed(StringSeed { ctx, what: "field \"format\"" })?;
                if name != "deathtensors" {
                    return Err(ctx.fail_kind(ErrorKind::WrongFormatName));
                }
            }
            "format_version" => {
                if version_seen {
                    return Err(duplicate(ctx, "header", "format_version"));
                }
                version_seen = true;
                let v = map.next_value_seed(UintSeed {
                    ctx,
                    kind: || ErrorKind::WrongType {
                        what: "field \"format_version\"",
                        expected: "a non-negative integer",
                    },
                })?;
                if v != 1 {
                    return Err(ctx.fail_kind(ErrorKind::UnsupportedFormatVersion(v)));
                }
            }
            "created_by" => {
                if created_by.is_some() {
                    return Err(duplicate(ctx, "header", "created_by"));
                }
                created_by = Some(map.next_value_seed(StringSeed { ctx, what: "field \"created_by\"" })?);
            }
            "alignment" => {
                if alignment.is_some() {
                    return Err(duplicate(ctx, "header", "alignment"));
                }
                alignment = Some(map.next_value_seed(UintSeed {
                    ctx,
                    kind: || ErrorKind::WrongType { what: "field \"alignment\"", expected: "a non-negative integer" },
                })?);
            }
            "global_metadata" => {
                if metadata.is_some() {
                    return Err(duplicate(ctx, "header", "global_metadata"));
                }
                metadata = Some(
                    map.next_value_seed(MetadataSeed { ctx, what: "global_metadata", nullable: false })?
                        .unwrap_or_default(),
                );
            }
            "tensors" => {
                if tensors.is_some() {
                    return Err(duplicate(ctx, "header", "tensors"));
                }
                tensors = Some(map.next_value_seed(TensorsSeed { ctx })?);
            }
            other => {
                return Err(ctx.fail_kind(ErrorKind::UnknownField { field: other.into() }));
            }
        }
    }
    if !format_seen {
        return Err(ctx.fail_kind(ErrorKind::MissingField { field: "format" }));
    }
    if !version_seen {
        return Err(ctx.fail_kind(ErrorKind::MissingField { field: "format_version" }));
    }
    let Some(tensors) = tensors else {
        return Err(ctx.fail_kind(ErrorKind::MissingField { field: "tensors" }));
    };
    Ok(RawHeader {
        format: Format::Deathtensors,
        created_by,
        alignment,
        metadata: Some(metadata.unwrap_or_default()),
        tensors,
        encryption,
        compression,
    })
}

fn safetensors_top<'de, A: MapAccess<'de>>(ctx: Ctx<'_>, mut map: A) -> core::result::Result<RawHeader, A::Error> {
    let mut metadata_seen = false;
    let mut metadata: Option<Metadata> = None;
    let mut tensors = Vec::with_capacity(ctx.capacity(map.size_hint()));
    while let Some(key) = map.next_key_seed(KeySeed)? {
        if key.as_str() == "__metadata__" {
            if metadata_seen {
                return Err(duplicate(ctx, "header", "__metadata__"));
            }
            metadata_seen = true;
            metadata = map.next_value_seed(MetadataSeed { ctx, what: "__metadata__", nullable: true })?;
            continue;
        }
        let tensor = tensor_entry(ctx, &mut map, key, Format::Safetensors, tensors.len())?;
        tensors.push(tensor);
    }
    Ok(RawHeader {
        format: Format::Safetensors,
        created_by: None,
        alignment: None,
        metadata,
        tensors,
        encryption: None,
        compression: None,
    })
}

/// Any JSON value of a nested section, built into a [`Tree`] with the
/// header's rules: no duplicate keys, bounded nesting.
struct TreeSeed<'a> {
    ctx: Ctx<'a>,
    /// The section, for `DuplicateKey` errors.
    within: &'static str,
    depth: usize,
}

seed_is_its_own_visitor!(TreeSeed<'_> => Tree);

impl<'de> Visitor<'de> for TreeSeed<'_> {
    type Value = Tree;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> core::result::Result<Tree, E> {
        Ok(Tree::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> core::result::Result<Tree, E> {
        Ok(Tree::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> core::result::Result<Tree, E> {
        Ok(Tree::Uint(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<Tree, E> {
        // Only for a number written with a minus sign (see `UintSeed`):
        // `-0` too, which simd-json reads as the integer 0 and serde_json
        // as a float, is never a valid unsigned field.
        Ok(Tree::OtherNumber)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<Tree, E> {
        Ok(Tree::OtherNumber)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> core::result::Result<Tree, E> {
        Ok(Tree::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> core::result::Result<Tree, E> {
        Ok(Tree::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> core::result::Result<Tree, A::Error> {
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(TreeSeed { ..inner })? {
            items.push(v);
        }
        Ok(Tree::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Tree, A::Error> {
        let inner = self.nested()?;
        let mut fields: Vec<(String, Tree)> = Vec::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(TreeSeed { ..inner })?;
            fields.push((key.into_string(), value));
        }
        // Sorted, duplicates are neighbours: O(n log n) for objects of
        // thousands of keys (cryptotensors' per-tensor table).
        let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(duplicate(self.ctx, self.within, w[0]));
        }
        Ok(Tree::Object(fields))
    }
}

impl<'a> TreeSeed<'a> {
    /// The seed for the values inside this array or object.
    fn nested<E: de::Error>(&self) -> core::result::Result<TreeSeed<'a>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(self.ctx.fail(Error::limit("nesting depth", (self.depth + 1) as u64, MAX_DEPTH as u64)));
        }
        Ok(TreeSeed { ctx: self.ctx, within: self.within, depth: self.depth + 1 })
    }
}

/// Decodes a JSON document nested in a metadata string (cryptotensors'
/// fields) with the header's rules: duplicate keys are errors, nesting is
/// bounded, nothing may follow the value.
pub(crate) fn tree(json: &[u8], within: &'static str) -> Result<Tree> {
    let slot = Cell::new(None);
    let limits = Limits::DEFAULT;
    let ctx = Ctx { limits: &limits, slot: &slot, json_len: json.len() };
    let mut de = serde_json::Deserializer::from_slice(json);
    let result = TreeSeed { ctx, within, depth: 0 }.deserialize(&mut de).and_then(|t| de.end().map(|()| t));
    match (result, slot.take()) {
        (_, Some(err)) => Err(err),
        (Ok(tree), None) => Ok(tree),
        (Err(e), None) => {
            Err(Error::new(ErrorKind::InvalidJson { message: alloc::format!("in {within}: {e}").into() }))
        }
    }
}

/// Validates a tensor name, then decodes its entry.
fn tensor_entry<'de, A: MapAccess<'de>>(
    ctx: Ctx<'_>,
    map: &mut A,
    key: Key<'de>,
    format: Format,
    count: usize,
) -> core::result::Result<TensorInfo, A::Error> {
    let limits = ctx.limits;
    if count as u64 >= limits.max_tensors {
        return Err(ctx.fail(Error::limit("tensor count", count as u64 + 1, limits.max_tensors)));
    }
    if let Err(err) = crate::tensor::check_name(key.as_str(), limits) {
        return Err(ctx.fail(err));
    }
    let name = key.into_string();
    match map.next_value_seed(TensorSeed { ctx, format }) {
        Ok((dtype, shape, data_offsets, metadata, sha256)) => Ok(TensorInfo {
            name: name.into(),
            dtype,
            shape: shape.into(),
            data_offsets,
            metadata,
            sha256: sha256.map(Box::new),
        }),
        Err(e) => {
            ctx.annotate(&name);
            Err(e)
        }
    }
}

/// The `tensors` object of a deathtensors header.
struct TensorsSeed<'a> {
    ctx: Ctx<'a>,
}

seed_is_its_own_visitor!(TensorsSeed<'_> => Vec<TensorInfo>);

impl<'de> Visitor<'de> for TensorsSeed<'_> {
    type Value = Vec<TensorInfo>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of tensors")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Self::Value, A::Error> {
        let mut tensors = Vec::with_capacity(self.ctx.capacity(map.size_hint()));
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let tensor = tensor_entry(self.ctx, &mut map, key, Format::Deathtensors, tensors.len())?;
            tensors.push(tensor);
        }
        Ok(tensors)
    }
    reject_non_object!("field \"tensors\"", "a JSON object");
}

type TensorFields = (Dtype, Vec<u64>, (u64, u64), Metadata, Option<[u8; 32]>);

/// One tensor's entry.
struct TensorSeed<'a> {
    ctx: Ctx<'a>,
    format: Format,
}

seed_is_its_own_visitor!(TensorSeed<'_> => TensorFields);

impl<'de> Visitor<'de> for TensorSeed<'_> {
    type Value = TensorFields;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tensor object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let dt = self.format == Format::Deathtensors;
        let mut dtype = None;
        let mut shape = None;
        let mut offsets = None;
        let mut metadata = None;
        let mut sha256 = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.as_str() {
                "dtype" => {
                    if dtype.is_some() {
                        return Err(duplicate(ctx, "tensor", "dtype"));
                    }
                    dtype = Some(map.next_value_seed(DtypeSeed { ctx })?);
                }
                "shape" => {
                    if shape.is_some() {
                        return Err(duplicate(ctx, "tensor", "shape"));
                    }
                    shape = Some(map.next_value_seed(ShapeSeed { ctx })?);
                }
                "data_offsets" => {
                    if offsets.is_some() {
                        return Err(duplicate(ctx, "tensor", "data_offsets"));
                    }
                    offsets = Some(map.next_value_seed(OffsetsSeed { ctx })?);
                }
                "metadata" if dt => {
                    if metadata.is_some() {
                        return Err(duplicate(ctx, "tensor", "metadata"));
                    }
                    metadata = Some(
                        map.next_value_seed(MetadataSeed { ctx, what: "tensor metadata", nullable: false })?
                            .unwrap_or_default(),
                    );
                }
                "sha256" if dt => {
                    if sha256.is_some() {
                        return Err(duplicate(ctx, "tensor", "sha256"));
                    }
                    let hex = map.next_value_seed(StringSeed { ctx, what: "field \"sha256\"" })?;
                    match parse_digest(&hex) {
                        Some(d) => sha256 = Some(d),
                        None => return Err(ctx.fail_kind(ErrorKind::InvalidDigest)),
                    }
                }
                other => return Err(ctx.fail_kind(ErrorKind::UnknownField { field: other.into() })),
            }
        }
        let Some(dtype) = dtype else {
            return Err(ctx.fail_kind(ErrorKind::MissingField { field: "dtype" }));
        };
        let Some(shape) = shape else {
            return Err(ctx.fail_kind(ErrorKind::MissingField { field: "shape" }));
        };
        let Some(offsets) = offsets else {
            return Err(ctx.fail_kind(ErrorKind::MissingField { field: "data_offsets" }));
        };
        Ok((dtype, shape, offsets, metadata.unwrap_or_default(), sha256))
    }
    reject_non_object!("tensor entry", "a JSON object");
}

/// Parses 64 lowercase hex digits.
pub(crate) fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    crate::json::parse_hex(hex)
}

struct DtypeSeed<'a> {
    ctx: Ctx<'a>,
}

seed_is_its_own_visitor!(DtypeSeed<'_> => Dtype);

impl<'de> Visitor<'de> for DtypeSeed<'_> {
    type Value = Dtype;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a dtype name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> core::result::Result<Dtype, E> {
        Dtype::from_name(v).ok_or_else(|| self.ctx.fail_kind(ErrorKind::UnknownDtype(v.into())))
    }
    reject_non_string!("field \"dtype\"", "a string");
}

/// A string value.
struct StringSeed<'a> {
    ctx: Ctx<'a>,
    what: &'static str,
}

seed_is_its_own_visitor!(StringSeed<'_> => String);

impl<'de> Visitor<'de> for StringSeed<'_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> core::result::Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: de::Error>(self, v: String) -> core::result::Result<String, E> {
        Ok(v)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> core::result::Result<String, E> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<String, E> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> core::result::Result<String, E> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<String, E> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_unit<E: de::Error>(self) -> core::result::Result<String, E> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<String, A::Error> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> core::result::Result<String, A::Error> {
        Err(self.ctx.wrong_type(self.what, "a string"))
    }
}

/// A non-negative integer; anything else is the error `kind` makes.
struct UintSeed<'a> {
    ctx: Ctx<'a>,
    kind: fn() -> ErrorKind,
}

seed_is_its_own_visitor!(UintSeed<'_> => u64);

impl<'de> Visitor<'de> for UintSeed<'_> {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> core::result::Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<u64, E> {
        // Both backends call this only for a number written with a minus
        // sign. simd-json reads `-0` as the integer 0, serde_json (and so
        // safetensors) as a float: refuse it whatever the backend.
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<u64, E> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> core::result::Result<u64, E> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> core::result::Result<u64, E> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_unit<E: de::Error>(self) -> core::result::Result<u64, E> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<u64, A::Error> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> core::result::Result<u64, A::Error> {
        Err(self.ctx.fail_kind((self.kind)()))
    }
}

/// Implements every non-sequence `visit_*` of a visitor as the error `$kind`.
macro_rules! reject_non_seq {
    ($ty:ty, $kind:expr) => {
        fn visit_str<E: de::Error>(self, _: &str) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_unit<E: de::Error>(self) -> core::result::Result<$ty, E> {
            Err(self.ctx.fail_kind($kind))
        }
        fn visit_map<A: MapAccess<'de>>(self, _: A) -> core::result::Result<$ty, A::Error> {
            Err(self.ctx.fail_kind($kind))
        }
    };
}

/// A shape: an array of non-negative integers, at most `max_rank` of them.
struct ShapeSeed<'a> {
    ctx: Ctx<'a>,
}

seed_is_its_own_visitor!(ShapeSeed<'_> => Vec<u64>);

impl<'de> Visitor<'de> for ShapeSeed<'_> {
    type Value = Vec<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of non-negative integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> core::result::Result<Vec<u64>, A::Error> {
        let max = self.ctx.limits.max_rank;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(4).min(8));
        while let Some(v) = seq.next_element_seed(UintSeed { ctx: self.ctx, kind: || ErrorKind::InvalidDimension })? {
            if out.len() as u64 >= max {
                return Err(self.ctx.fail(Error::limit("tensor rank", out.len() as u64 + 1, max)));
            }
            out.push(v);
        }
        Ok(out)
    }
    reject_non_seq!(Vec<u64>, ErrorKind::InvalidDimension);
}

/// `data_offsets`: an array of exactly two non-negative integers, decoded
/// without allocating.
struct OffsetsSeed<'a> {
    ctx: Ctx<'a>,
}

impl<'de> DeserializeSeed<'de> for OffsetsSeed<'_> {
    type Value = (u64, u64);
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> core::result::Result<(u64, u64), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed<'_> {
    type Value = (u64, u64);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of two non-negative integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> core::result::Result<(u64, u64), A::Error> {
        let ctx = self.ctx;
        let mut next = || seq.next_element_seed(UintSeed { ctx, kind: || ErrorKind::InvalidOffsets });
        // Two offsets, then the end of the array: fewer or more (whatever
        // the extra element is) is `InvalidOffsets`.
        let Some(start) = next()? else {
            return Err(ctx.fail_kind(ErrorKind::InvalidOffsets));
        };
        let Some(end) = next()? else {
            return Err(ctx.fail_kind(ErrorKind::InvalidOffsets));
        };
        if next()?.is_some() {
            return Err(ctx.fail_kind(ErrorKind::InvalidOffsets));
        }
        Ok((start, end))
    }
    reject_non_seq!((u64, u64), ErrorKind::InvalidOffsets);
}

/// A string-to-string object. `null` gives `None` where `nullable` (safetensors'
/// `__metadata__` is an `Option`).
struct MetadataSeed<'a> {
    ctx: Ctx<'a>,
    what: &'static str,
    nullable: bool,
}

seed_is_its_own_visitor!(MetadataSeed<'_> => Option<Metadata>);

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<Metadata>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of strings")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Self::Value, A::Error> {
        let mut out = BTreeMap::new();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = key.into_string();
            let value = map.next_value_seed(MetaValueSeed { ctx: self.ctx, key: &key })?;
            if out.contains_key(&key) {
                return Err(duplicate(self.ctx, self.what, &key));
            }
            out.insert(key, value);
        }
        Ok(Some(out))
    }
    fn visit_unit<E: de::Error>(self) -> core::result::Result<Self::Value, E> {
        if self.nullable {
            Ok(None)
        } else {
            Err(self.ctx.wrong_type(self.what, "an object of strings"))
        }
    }
    fn visit_str<E: de::Error>(self, _: &str) -> core::result::Result<Self::Value, E> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> core::result::Result<Self::Value, E> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<Self::Value, E> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> core::result::Result<Self::Value, E> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<Self::Value, E> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<Self::Value, A::Error> {
        Err(self.ctx.wrong_type(self.what, "an object of strings"))
    }
}

struct MetaValueSeed<'a, 'k> {
    ctx: Ctx<'a>,
    key: &'k str,
}

seed_is_its_own_visitor!(MetaValueSeed<'_, '_> => String);

impl MetaValueSeed<'_, '_> {
    fn not_string<E: de::Error>(&self) -> E {
        self.ctx.fail_kind(ErrorKind::MetadataNotString { key: self.key.into() })
    }
}

impl<'de> Visitor<'de> for MetaValueSeed<'_, '_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> core::result::Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_string<E: de::Error>(self, v: String) -> core::result::Result<String, E> {
        Ok(v)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> core::result::Result<String, E> {
        Err(self.not_string())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> core::result::Result<String, E> {
        Err(self.not_string())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> core::result::Result<String, E> {
        Err(self.not_string())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> core::result::Result<String, E> {
        Err(self.not_string())
    }
    fn visit_unit<E: de::Error>(self) -> core::result::Result<String, E> {
        Err(self.not_string())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> core::result::Result<String, A::Error> {
        Err(self.not_string())
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> core::result::Result<String, A::Error> {
        Err(self.not_string())
    }
}

/// The `compression` section (`docs/FORMAT.md` section 15.2). Its chunk
/// tables share one budget of `max_chunks` entries, counted as they are
/// decoded, so a hostile table is refused before it is stored.
struct CompressionSeed<'a> {
    ctx: Ctx<'a>,
}

seed_is_its_own_visitor!(CompressionSeed<'_> => crate::compression::RawCompression);

impl<'de> Visitor<'de> for CompressionSeed<'_> {
    type Value = crate::compression::RawCompression;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the compression section")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let mut codec = None;
        let mut level = None;
        let mut chunk_size = None;
        let mut tensors = None;
        let within = "compression";
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.as_str() {
                "codec" => {
                    if codec.is_some() {
                        return Err(duplicate(ctx, within, "codec"));
                    }
                    let name = map.next_value_seed(StringSeed { ctx, what: "compression.codec" })?;
                    codec = Some(crate::compression::Codec::from_name(&name).map_err(|e| ctx.fail(e))?);
                }
                "level" => {
                    if level.is_some() {
                        return Err(duplicate(ctx, within, "level"));
                    }
                    let v = map
                        .next_value_seed(UintSeed { ctx, kind: || ErrorKind::InvalidCompression { what: "level" } })?;
                    level = Some(u32::try_from(v).unwrap_or(u32::MAX));
                }
                "chunk_size" => {
                    if chunk_size.is_some() {
                        return Err(duplicate(ctx, within, "chunk_size"));
                    }
                    chunk_size = Some(map.next_value_seed(UintSeed {
                        ctx,
                        kind: || ErrorKind::InvalidCompression { what: "chunk_size" },
                    })?);
                }
                "tensors" => {
                    if tensors.is_some() {
                        return Err(duplicate(ctx, within, "tensors"));
                    }
                    tensors = Some(map.next_value_seed(ChunkTablesSeed { ctx })?);
                }
                other => return Err(ctx.fail_kind(ErrorKind::UnknownField { field: other.into() })),
            }
        }
        let (Some(codec), Some(level), Some(chunk_size), Some(tensors)) = (codec, level, chunk_size, tensors) else {
            return Err(ctx.fail_kind(ErrorKind::MissingField { field: "codec, level, chunk_size or tensors" }));
        };
        let compression = crate::compression::Compression { codec, level, chunk_size };
        compression.check().map_err(|e| ctx.fail(e))?;
        Ok(crate::compression::RawCompression { compression, tensors })
    }
    reject_non_object!("field \"compression\"", "a JSON object");
}

/// `compression.tensors`: tensor name → stored chunk lengths.
struct ChunkTablesSeed<'a> {
    ctx: Ctx<'a>,
}

const CHUNK_TABLES: ErrorKind =
    ErrorKind::WrongType { what: "field \"compression.tensors\"", expected: "an object of integer arrays" };

seed_is_its_own_visitor!(ChunkTablesSeed<'_> => Vec<(String, Vec<u64>)>);

impl<'de> Visitor<'de> for ChunkTablesSeed<'_> {
    type Value = Vec<(String, Vec<u64>)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object of chunk tables")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> core::result::Result<Self::Value, A::Error> {
        let ctx = self.ctx;
        let budget = Cell::new(ctx.limits.max_chunks);
        let mut out: Vec<(String, Vec<u64>)> = Vec::with_capacity(ctx.capacity(map.size_hint()));
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if out.len() as u64 >= ctx.limits.max_tensors {
                return Err(ctx.fail(Error::limit("tensor count", out.len() as u64 + 1, ctx.limits.max_tensors)));
            }
            let name = key.into_string();
            match map.next_value_seed(ChunkListSeed { ctx, budget: &budget }) {
                Ok(lens) => out.push((name, lens)),
                Err(e) => {
                    ctx.annotate(&name);
                    return Err(e);
                }
            }
        }
        // Sorted, duplicates are neighbours.
        let mut names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(duplicate(ctx, "compression.tensors", w[0]));
        }
        Ok(out)
    }
    reject_non_object!("field \"compression.tensors\"", "an object of integer arrays");
}

/// One chunk table: stored lengths, charged to the section's budget.
struct ChunkListSeed<'a, 'b> {
    ctx: Ctx<'a>,
    budget: &'b Cell<u64>,
}

seed_is_its_own_visitor!(ChunkListSeed<'_, '_> => Vec<u64>);

impl<'de> Visitor<'de> for ChunkListSeed<'_, '_> {
    type Value = Vec<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of chunk lengths")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> core::result::Result<Vec<u64>, A::Error> {
        let ctx = self.ctx;
        // Each entry takes at least two bytes of JSON ("1,").
        let cap = seq.size_hint().unwrap_or(0).min(ctx.json_len / 2 + 1).min(self.budget.get() as usize);
        let mut out = Vec::with_capacity(cap);
        while let Some(v) =
            seq.next_element_seed(UintSeed { ctx, kind: || ErrorKind::InvalidCompression { what: "chunk length" } })?
        {
            let left = self.budget.get();
            if left == 0 {
                let max = ctx.limits.max_chunks;
                return Err(ctx.fail(Error::limit("chunk count", max.saturating_add(1), max)));
            }
            self.budget.set(left - 1);
            out.push(v);
        }
        Ok(out)
    }
    reject_non_seq!(Vec<u64>, CHUNK_TABLES);
}

#[cfg(test)]
mod control_tests {
    use super::{first_control, is_control};

    #[test]
    fn first_control_agrees_with_a_plain_scan() {
        let naive = |b: &[u8]| b.iter().position(|&c| is_control(c));
        for len in 0..40 {
            for fill in [b'a', b' ', b'\t', b'\n', b'\r', 0x7f, 0x80, 0xff, 0x20, 0x21] {
                let mut bytes = alloc::vec![fill; len];
                assert_eq!(first_control(&bytes), naive(&bytes));
                for at in 0..len {
                    for special in [0x00, 0x01, 0x08, 0x0b, 0x1f, b'\t', b'\n', b'\r'] {
                        bytes[at] = special;
                        assert_eq!(first_control(&bytes), naive(&bytes), "{bytes:?}");
                        // A later control must not win over an earlier one.
                        if at + 3 < len {
                            bytes[at + 3] = 0x01;
                            assert_eq!(first_control(&bytes), naive(&bytes), "{bytes:?}");
                            bytes[at + 3] = fill;
                        }
                        bytes[at] = fill;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod stream_tests {
    use alloc::string::String;

    use super::parse_full;
    use crate::tensor::Format;
    use crate::Limits;

    /// A safetensors header of `n` tensors, with `pad` spaces after each
    /// comma (not the form writers produce: the full decoder's input).
    fn header(n: usize, pad: usize) -> String {
        let spaces = " ".repeat(pad);
        let entries: alloc::vec::Vec<String> = (0..n)
            .map(|i| {
                alloc::format!(
                    "\"t{i}\":{{\"dtype\":\"F32\",{spaces}\"shape\":[2],{spaces}\"data_offsets\":[{},{}]}}",
                    i * 8,
                    i * 8 + 8
                )
            })
            .collect();
        alloc::format!("{{\"__metadata__\":{{\"k\":\"v\"}},{spaces}{}}}", entries.join(","))
    }

    #[test]
    fn long_headers_stream_to_the_same_result() {
        let small = header(2000, 1);
        let long = header(2000, 1200); // over 4 MiB: serde_json, streaming
        assert!(small.len() < 4 << 20 && long.len() > 4 << 20);
        let a = parse_full(small.as_bytes(), Format::Safetensors, &Limits::DEFAULT).unwrap();
        let b = parse_full(long.as_bytes(), Format::Safetensors, &Limits::DEFAULT).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn dense_hostile_headers_fail_alike_either_way() {
        // Nested and long arrays where a tensor entry belongs, short and
        // long: the same error, found at the first bad value.
        let nested = |n: usize| alloc::format!("{}{}", "[".repeat(n), "]".repeat(n));
        let flat = |n: usize| alloc::format!("[{}0]", "0,".repeat(n));
        for (name, value) in [("nested", &nested as &dyn Fn(usize) -> String), ("flat", &flat)] {
            let errors: alloc::vec::Vec<String> = [100usize, 3 << 20]
                .iter()
                .map(|&n| {
                    let json = alloc::format!("{{\"x\":{}}}", value(n));
                    alloc::format!(
                        "{}",
                        parse_full(json.as_bytes(), Format::Safetensors, &Limits::DEFAULT).unwrap_err()
                    )
                })
                .collect();
            assert_eq!(errors[0], errors[1], "{name}");
            assert!(errors[0].contains("\"x\""), "{}", errors[0]);
        }
    }
}
