//! A fast path for headers written the way writers write them.
//!
//! Decodes, in one pass and without a tape or serde, headers whose JSON uses
//! only a strict subset of the language: strings without escapes or control
//! characters, non-negative integers without sign, fraction or exponent,
//! objects and arrays only where the schema has them, known keys at most
//! once, and values the full decoder accepts. On anything else it gives up
//! (`None`), and the full decoder (`de`) decodes the header from the start
//! and reports what is wrong: every error comes from there.
//!
//! It refuses every raw control character (JSON's whitespace aside), so
//! `de::parse` looks for them only before the full decoder runs.
//!
//! Large objects of tensors are decoded in two halves at once when the
//! caller lends a thread ([`Fork`]; see `object_of_tensors`).
//!
//! So the only thing this module must get right is what it accepts: for
//! every header it returns, the full decoder returns the same `RawHeader`
//! (in the subset, JSON means the same to simd-json and serde_json). Debug
//! builds (tests, fuzzing) check that on every parse, in `de::parse`.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::compression::{Codec, Compression, RawCompression};
use crate::fork::{PREFAULT_MIN_ENTRIES, RELEASE_STEP};
use crate::name::{Arena, Name};
use crate::raw::RawHeader;
use crate::tensor::{check_name, Format, Metadata, TensorInfo};
use crate::{Dtype, Fork, Limits};

/// Tensor objects at least this long are decoded in two halves, through
/// the caller's [`Fork`] (about 2,500 entries: below, a thread costs more
/// than it saves).
const SPLIT_MIN: usize = 256 << 10;

/// Decodes `json` if it is in the subset and valid, `None` otherwise.
pub(crate) fn parse(json: &str, format: Format, limits: &Limits, fork: &dyn Fork) -> Option<RawHeader> {
    // simd-json refuses inputs of 4 GiB and more; leave those to it.
    #[cfg(feature = "std")]
    if json.len() > u32::MAX as usize {
        return None;
    }
    let mut p = Parser { text: json, bytes: json.as_bytes(), at: 0, limits };
    let raw = match format {
        Format::Deathtensors => p.deathtensors(fork)?,
        Format::Safetensors => p.safetensors(fork)?,
        // Not JSON: `Header::parse` decodes it elsewhere.
        Format::Bintensors => return None,
    };
    p.skip_ws();
    (p.at == json.len()).then_some(raw)
}

#[derive(Clone, Copy)]
struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    limits: &'a Limits,
}

/// What a run over the members of an object of tensors found.
struct Entries<'f> {
    tensors: Vec<TensorInfo>,
    /// safetensors' `__metadata__` member, and whether there was one.
    metadata: Option<Metadata>,
    metadata_seen: bool,
    /// Told of the room `tensors` is about to fill ([`Fork::prefault`]).
    fork: &'f dyn Fork,
    /// How many entries `tensors` holds once the room announced so far is
    /// filled; `usize::MAX` for a list made with room for fewer than
    /// `PREFAULT_MIN_ENTRIES`, which is never announced (nor are its
    /// names' blocks).
    announced: usize,
    /// The entries' names, written a block at a time.
    names: Arena,
    /// How many entries have names that are sealed ([`Arena::seal`]).
    sealed: usize,
    /// Where the input not yet released ([`Fork::release`]) starts.
    released: usize,
}

impl<'f> Entries<'f> {
    /// Entries read from `input_len` bytes of JSON from `from` on, into
    /// `tensors`.
    fn new(tensors: Vec<TensorInfo>, from: usize, input_len: usize, fork: &'f dyn Fork) -> Entries<'f> {
        let announced = if tensors.capacity() >= PREFAULT_MIN_ENTRIES { 0 } else { usize::MAX };
        let names = Arena::new(input_len);
        Entries { tensors, metadata: None, metadata_seen: false, fork, announced, names, sealed: 0, released: from }
    }

    /// Tells the fork that the input before `at` is done with, once that
    /// is [`RELEASE_STEP`] bytes or more past the last time.
    fn release_before(&mut self, input: &[u8], at: usize) {
        if at.saturating_sub(self.released) >= RELEASE_STEP {
            if let Some(done) = input.get(self.released..at) {
                self.fork.release(done);
            }
            self.released = at;
        }
    }

    /// The name `key` for the next entry, written into the names' block
    /// (a new one if it is full: the names of the entries before are
    /// sealed, and the new block's room announced ahead for a large list).
    fn name(&mut self, key: &str) -> Option<Name> {
        if !self.names.fits(key) {
            self.seal()?;
            let (fork, announce) = (self.fork, self.announced != usize::MAX);
            self.names.start_block(key, |room| {
                if announce && !room.is_empty() {
                    fork.prefault_bytes(room);
                }
            });
        }
        self.names.push(key)
    }

    /// Seals the names of the entries appended since the last seal.
    fn seal(&mut self) -> Option<()> {
        let pending = self.tensors.get_mut(self.sealed..)?;
        if !pending.is_empty() {
            self.names.seal(pending.iter_mut().map(|t| &mut t.name));
        }
        self.sealed = self.tensors.len();
        Some(())
    }

    /// Appends `tensor`, first announcing the next window of spare room
    /// when the last one is full.
    fn push(&mut self, tensor: TensorInfo) {
        let len = self.tensors.len();
        if len >= self.announced {
            self.announce_up_to(len + PREFAULT_MIN_ENTRIES);
        }
        self.tensors.push(tensor);
    }

    /// Announces the spare room up to a length of `total` entries (within
    /// the capacity) that was not announced yet.
    fn announce_up_to(&mut self, total: usize) {
        let len = self.tensors.len();
        let spare = self.tensors.spare_capacity_mut();
        let from = self.announced.saturating_sub(len).min(spare.len());
        let to = total.saturating_sub(len).min(spare.len());
        if let Some(room) = spare.get_mut(from..to).filter(|room| !room.is_empty()) {
            self.fork.prefault(room);
        }
        self.announced = self.announced.max(len + to);
    }
}

/// A `":{"dtype":"` : where a tensor's entry starts, after its name.
const ENTRY_START: &[u8; 12] = b"\":{\"dtype\":\"";

/// The index of the first `"`, `\\` or control character at or after
/// `from`: where a string without escapes ends, if that is a `"`.
///
/// Eight bytes at a time (names are tens of bytes long): in each word, the
/// classic zero-byte test flags the bytes equal to `"` or `\\` and those
/// below 0x20. A flag can only be wrong above a byte rightly flagged (a
/// borrow carries upwards from it), so the lowest flag is the first match.
fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let mut at = from;
    while let Some(word) = bytes.get(at..at.checked_add(8)?) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let v = u64::from_le_bytes(eight);
        let quote = v ^ (ONES * u64::from(b'"'));
        let backslash = v ^ (ONES * u64::from(b'\\'));
        let flags = (quote.wrapping_sub(ONES) & !quote
            | backslash.wrapping_sub(ONES) & !backslash
            | v.wrapping_sub(ONES * 0x20) & !v)
            & HIGH;
        if flags != 0 {
            return Some(at + (flags.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = bytes.get(at..)?;
    tail.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).map(|i| at + i)
}

/// The value of the ASCII digits `bytes` starts with, up to eight of them,
/// and how many there are (0 to 8).
///
/// Eight bytes at a time when there are eight (offsets are up to 10 or so
/// digits long): a byte is a digit when its high nibble is 3 and adding 6
/// keeps it 3. A carry out of a non-digit byte can only spoil the flags
/// above it, so the lowest flagged byte is the first non-digit. The digits
/// are then moved to the top of the word behind `'0'` padding and summed
/// pairwise by multiplication (the method of `fast_float` and simdjson).
fn leading_digits(bytes: &[u8]) -> (u64, usize) {
    const ZEROS: u64 = u64::from_le_bytes([b'0'; 8]);
    const HIGH_NIBBLES: u64 = u64::from_le_bytes([0xF0; 8]);
    let Some(word) = bytes.get(..8) else {
        // Near the end of the input: one byte at a time.
        let mut value = 0u64;
        let mut n = 0;
        while let Some(&b @ b'0'..=b'9') = bytes.get(n) {
            if n == 8 {
                break;
            }
            value = value * 10 + u64::from(b - b'0');
            n += 1;
        }
        return (value, n);
    };
    let mut eight = [0u8; 8];
    eight.copy_from_slice(word);
    let v = u64::from_le_bytes(eight);
    let not_digit =
        ((v & HIGH_NIBBLES) ^ ZEROS) | ((v.wrapping_add(u64::from_le_bytes([6; 8])) & HIGH_NIBBLES) ^ ZEROS);
    let n = (not_digit.trailing_zeros() / 8) as usize;
    if n == 0 {
        return (0, 0);
    }
    // The n digits at the top, '0's below them: the same number in 8 digits.
    let shift = 8 * (8 - n as u32);
    let padded = (v.checked_shl(shift).unwrap_or(0)) | ZEROS.checked_shr(8 * n as u32).unwrap_or(0);
    (eight_digits(padded), n)
}

/// The value of eight ASCII digits, the first in the lowest byte.
fn eight_digits(v: u64) -> u64 {
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 100 + (1_000_000 << 32);
    const MUL2: u64 = 1 + (10_000 << 32);
    let v = v.wrapping_sub(u64::from_le_bytes([b'0'; 8]));
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    ((v & MASK).wrapping_mul(MUL1).wrapping_add(((v >> 16) & MASK).wrapping_mul(MUL2))) >> 32
}

/// About the fewest bytes writers use for one tensor entry. The tensor list
/// is sized from the input's length with it: it rarely has to grow, and
/// reserves at most about 1.1 times the input's length (104-byte entries).
const TENSOR_JSON_ESTIMATE: usize = 96;

impl<'a> Parser<'a> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string without escapes and control characters.
    fn str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let end = string_end(self.bytes, start)?;
        if self.bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.at = end + 1;
        // Both ends are at ASCII bytes, so at character boundaries.
        self.text.get(start..end)
    }

    /// A non-negative integer that fits in a `u64`, in the canonical form
    /// (no sign, no leading zero, no fraction, no exponent).
    fn uint(&mut self) -> Option<u64> {
        self.skip_ws();
        let first = *self.bytes.get(self.at)?;
        if !first.is_ascii_digit() {
            return None;
        }
        let (mut value, digits) = leading_digits(self.bytes.get(self.at..).unwrap_or_default());
        if first == b'0' && digits > 1 {
            return None; // a leading zero: left to the full decoder
        }
        self.at += digits;
        if digits == 8 {
            while let Some(&b @ b'0'..=b'9') = self.bytes.get(self.at) {
                value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                self.at += 1;
            }
        }
        // Whatever else follows a number (a fraction, an exponent) is left
        // to the full decoder.
        match self.bytes.get(self.at) {
            Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') => Some(value),
            _ => None,
        }
    }

    /// An object, calling `member` on each key with the parser before the
    /// key's value, which `member` must consume.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key = self.str()?;
            self.eat(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object of strings.
    fn metadata(&mut self) -> Option<Metadata> {
        let mut out = Metadata::new();
        self.object(|p, key| {
            let value = p.str()?;
            if out.contains_key(key) {
                return None;
            }
            out.insert(key.to_string(), value.to_string());
            Some(())
        })?;
        Some(out)
    }

    /// The `compression` section (`docs/FORMAT.md` section 15.2) in the form
    /// our encoder writes it; anything else (escapes, a bad field, a
    /// repeated name, more than `max_chunks` entries) goes to the full
    /// decoder, which reports it.
    fn compression(&mut self) -> Option<RawCompression> {
        let (mut codec, mut level, mut chunk_size, mut tensors) = (None, None, None, None);
        let mut budget = self.limits.max_chunks;
        let max_tensors = self.limits.max_tensors;
        self.object(|p, key| {
            match key {
                "codec" if codec.is_none() => codec = Some(Codec::from_name(p.str()?).ok()?),
                "level" if level.is_none() => level = Some(u32::try_from(p.uint()?).ok()?),
                "chunk_size" if chunk_size.is_none() => chunk_size = Some(p.uint()?),
                "tensors" if tensors.is_none() => {
                    let mut out: Vec<(String, Vec<u64>)> = Vec::new();
                    p.object(|p, name| {
                        if out.len() as u64 >= max_tensors {
                            return None;
                        }
                        p.eat(b'[')?;
                        let mut lens = Vec::new();
                        if p.peek()? == b']' {
                            p.at += 1;
                        } else {
                            loop {
                                budget = budget.checked_sub(1)?;
                                lens.push(p.uint()?);
                                match p.peek()? {
                                    b',' => p.at += 1,
                                    b']' => {
                                        p.at += 1;
                                        break;
                                    }
                                    _ => return None,
                                }
                            }
                        }
                        out.push((name.to_string(), lens));
                        Some(())
                    })?;
                    let mut names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
                    names.sort_unstable();
                    if names.windows(2).any(|w| w[0] == w[1]) {
                        return None;
                    }
                    tensors = Some(out);
                }
                _ => return None,
            }
            Some(())
        })?;
        let compression = Compression { codec: codec?, level: level?, chunk_size: chunk_size? };
        compression.check().ok()?;
        Some(RawCompression { compression, tensors: tensors? })
    }

    /// A shape: at most `max_rank` integers.
    fn shape(&mut self) -> Option<Vec<u64>> {
        self.eat(b'[')?;
        let mut out = Vec::with_capacity(4);
        if self.peek()? == b']' {
            self.at += 1;
            return Some(out);
        }
        loop {
            if out.len() as u64 >= self.limits.max_rank {
                return None;
            }
            out.push(self.uint()?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    fn offsets(&mut self) -> Option<(u64, u64)> {
        self.eat(b'[')?;
        let start = self.uint()?;
        self.eat(b',')?;
        let end = self.uint()?;
        self.eat(b']')?;
        Some((start, end))
    }

    /// `literal`, byte for byte (no whitespace skipped).
    fn lit<const N: usize>(&mut self, literal: &[u8; N]) -> Option<()> {
        let end = self.at.checked_add(N)?;
        // A fixed-size compare: inlined, no call to memcmp.
        let here: &[u8; N] = self.bytes.get(self.at..end)?.try_into().ok()?;
        (here == literal).then(|| self.at = end)
    }

    /// A tensor's entry, after its key, named `name` (the key, checked).
    fn tensor(&mut self, name: &Name, format: Format) -> Option<TensorInfo> {
        let start = self.at;
        if let Some(t) = self.canonical_tensor(name, format) {
            return Some(t);
        }
        self.at = start;
        self.any_tensor(name, format)
    }

    /// A tensor's entry written as our encoder and safetensors' write it
    /// (`{"dtype":"F32","shape":[16],"data_offsets":[0,64]`, then `}`, or in a
    /// deathtensors header an optional `,"metadata":{..}`, an optional
    /// `,"sha256":".."` and `}`), matched literally: about twice as fast as walking it as an
    /// object. `None` for any other spelling, which `any_tensor` walks.
    fn canonical_tensor(&mut self, name: &Name, format: Format) -> Option<TensorInfo> {
        self.lit(b"{\"dtype\":\"")?;
        let end = string_end(self.bytes, self.at)?;
        let dtype = Dtype::from_name(self.text.get(self.at..end)?)?;
        self.at = end;
        self.lit(b"\",\"shape\":[")?;
        // Up to 8 dimensions on the stack; a shape of more than two is then
        // one exact allocation.
        let mut dims = [0u64; 8];
        let mut rank = 0;
        if self.lit(b"]").is_none() {
            loop {
                if rank == dims.len() || rank as u64 >= self.limits.max_rank {
                    return None;
                }
                *dims.get_mut(rank)? = self.uint()?;
                rank += 1;
                match self.bytes.get(self.at)? {
                    b',' => self.at += 1,
                    b']' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.lit(b",\"data_offsets\":[")?;
        let start = self.uint()?;
        self.lit(b",")?;
        let end = self.uint()?;
        self.lit(b"]")?;
        let mut metadata = Metadata::new();
        let mut sha256 = None;
        if format == Format::Deathtensors {
            // Absent (our encoder writes no empty one) or nearly always
            // `{}`: matched at once, without walking an object.
            if self.lit(b",\"metadata\":{}").is_none() && self.lit(b",\"metadata\":").is_some() {
                metadata = self.metadata()?;
            }
            if self.lit(b",\"sha256\":").is_some() {
                sha256 = Some(crate::json::parse_hex(self.str()?)?);
            }
        }
        self.lit(b"}")?;
        Some(TensorInfo {
            name: name.clone(),
            dtype,
            shape: crate::Shape::new(dims.get(..rank)?),
            data_offsets: (start, end),
            metadata,
            sha256: sha256.map(Box::new),
        })
    }

    /// A tensor's entry in any spelling of the subset.
    fn any_tensor(&mut self, name: &Name, format: Format) -> Option<TensorInfo> {
        let dt = format == Format::Deathtensors;
        let mut dtype = None;
        let mut shape = None;
        let mut offsets = None;
        let mut metadata = None;
        let mut sha256 = None;
        self.object(|p, key| {
            match key {
                "dtype" if dtype.is_none() => dtype = Some(Dtype::from_name(p.str()?)?),
                "shape" if shape.is_none() => shape = Some(p.shape()?),
                "data_offsets" if offsets.is_none() => offsets = Some(p.offsets()?),
                "metadata" if dt && metadata.is_none() => metadata = Some(p.metadata()?),
                "sha256" if dt && sha256.is_none() => sha256 = Some(crate::json::parse_hex(p.str()?)?),
                _ => return None,
            }
            Some(())
        })?;
        Some(TensorInfo {
            name: name.clone(),
            dtype: dtype?,
            shape: shape?.into(),
            data_offsets: offsets?,
            metadata: metadata.unwrap_or_default(),
            sha256: sha256.map(Box::new),
        })
    }

    /// One member of an object of tensors (a safetensors header, or the
    /// `tensors` of a deathtensors header), appended to `tensors`.
    fn tensor_entry(&mut self, out: &mut Entries<'_>, key: &str, format: Format) -> Option<()> {
        if out.tensors.len() as u64 >= self.limits.max_tensors {
            return None;
        }
        check_name(key, self.limits).ok()?;
        let name = out.name(key)?;
        let tensor = self.tensor(&name, format)?;
        out.push(tensor);
        Some(())
    }

    /// Room for the entries `len` bytes of JSON hold.
    fn entries_for<'f>(&self, len: usize, fork: &'f dyn Fork) -> Entries<'f> {
        let max = usize::try_from(self.limits.max_tensors).unwrap_or(usize::MAX);
        Entries::new(Vec::with_capacity((len / TENSOR_JSON_ESTIMATE + 1).min(max)), self.at, len, fork)
    }

    /// One member of an object of tensors: a tensor, or (safetensors)
    /// the `__metadata__`.
    fn member(&mut self, out: &mut Entries<'_>, key: &str, format: Format) -> Option<()> {
        if format == Format::Safetensors && key == "__metadata__" {
            // `null` (no metadata) is left to the full decoder.
            if out.metadata_seen {
                return None;
            }
            out.metadata_seen = true;
            out.metadata = Some(self.metadata()?);
            return Some(());
        }
        self.tensor_entry(out, key, format)
    }

    /// The members of an object of tensors up to its closing `}`
    /// (consumed): from just after the `{` (`first`), or from a key. Stops
    /// early, at the comma, when a member ends exactly at `stop - 1`;
    /// returns whether it did.
    fn members(&mut self, out: &mut Entries<'_>, format: Format, stop: usize, first: bool) -> Option<bool> {
        if first && self.peek()? == b'}' {
            self.at += 1;
            return Some(false);
        }
        loop {
            let key = self.str()?;
            self.eat(b':')?;
            self.member(out, key, format)?;
            out.release_before(self.bytes, self.at);
            match self.peek()? {
                b',' if self.at + 1 == stop => return Some(true),
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(false);
                }
                _ => return None,
            }
        }
    }

    /// Where a second decoder may start, about halfway through the rest of
    /// the input: the `"` of a name followed by `":{"dtype":"`, after a
    /// `,`. A guess (a string could hold those bytes): `object_of_tensors`
    /// uses it only if the first decoder ends a member right before it.
    fn split_point(&self) -> Option<usize> {
        let rest = self.bytes.len().checked_sub(self.at)?;
        if rest < SPLIT_MIN {
            return None;
        }
        let mid = self.at + rest / 2;
        let found = mid + self.bytes.get(mid..)?.windows(ENTRY_START.len()).position(|w| w == ENTRY_START)?;
        let quote = self.bytes.get(..found)?.iter().rposition(|&b| b == b'"')?;
        (quote > self.at && self.bytes.get(quote - 1) == Some(&b',')).then_some(quote)
    }

    /// An object of tensors (a safetensors header, or the `tensors` of a
    /// deathtensors header), `{` to `}`. A large one is decoded in two
    /// halves at once through `fork`: the second from a `split_point`, the
    /// first up to it. The first decodes on past it if no member ends right
    /// there (then the second's work is dropped), so the result is always
    /// that of one decoder from the `{`: each member is decoded the same
    /// wherever a decoder starts, once it starts at a member.
    fn object_of_tensors<'f>(&mut self, format: Format, fork: &'f dyn Fork) -> Option<Entries<'f>> {
        self.eat(b'{')?;
        let mut first = self.entries_for(self.bytes.len().saturating_sub(self.at), fork);
        let Some(split) = self.split_point().filter(|_| fork.is_parallel()) else {
            self.members(&mut first, format, usize::MAX, true)?;
            first.seal()?;
            return Some(first);
        };
        let mut other = Parser { at: split, ..*self };
        let rest = self.bytes.len().saturating_sub(split);
        let mut second = Entries::new(Vec::with_capacity(first.tensors.capacity() / 2 + 1), split, rest, fork);
        let (mut a, mut b) = (None, None);
        // Each half seals its own names, on its own thread.
        fork.join(
            &mut || a = self.members(&mut first, format, split, true).filter(|_| first.seal().is_some()),
            &mut || b = other.members(&mut second, format, usize::MAX, false).filter(|_| second.seal().is_some()),
        );
        if !a? {
            return Some(first);
        }
        // The second decoder started at a member: its result is the rest.
        b?;
        self.at = other.at;
        if first.metadata_seen && second.metadata_seen {
            return None;
        }
        if second.metadata_seen {
            first.metadata = second.metadata;
            first.metadata_seen = true;
        }
        if (first.tensors.len() + second.tensors.len()) as u64 > self.limits.max_tensors {
            return None;
        }
        // The second half's entries are moved into room the first has not
        // written yet (it holds room for all of them unless the estimate
        // fell short).
        first.announce_up_to(first.tensors.len() + second.tensors.len());
        first.tensors.append(&mut second.tensors);
        Some(first)
    }

    fn safetensors(&mut self, fork: &dyn Fork) -> Option<RawHeader> {
        let entries = self.object_of_tensors(Format::Safetensors, fork)?;
        Some(RawHeader {
            format: Format::Safetensors,
            created_by: None,
            alignment: None,
            metadata: entries.metadata,
            tensors: entries.tensors,
            encryption: None,
            compression: None,
        })
    }

    fn deathtensors(&mut self, fork: &dyn Fork) -> Option<RawHeader> {
        let mut format_seen = false;
        let mut version_seen = false;
        let mut created_by: Option<String> = None;
        let mut alignment = None;
        let mut metadata = None;
        let mut tensors = None;
        let mut compression = None;
        self.object(|p, key| {
            match key {
                "compression" if compression.is_none() => compression = Some(p.compression()?),
                "format" if !format_seen => {
                    format_seen = true;
                    if p.str()? != "deathtensors" {
                        return None;
                    }
                }
                "format_version" if !version_seen => {
                    version_seen = true;
                    if p.uint()? != 1 {
                        return None;
                    }
                }
                "created_by" if created_by.is_none() => created_by = Some(p.str()?.to_string()),
                "alignment" if alignment.is_none() => alignment = Some(p.uint()?),
                "global_metadata" if metadata.is_none() => metadata = Some(p.metadata()?),
                "tensors" if tensors.is_none() => {
                    tensors = Some(p.object_of_tensors(Format::Deathtensors, fork)?.tensors);
                }
                _ => return None,
            }
            Some(())
        })?;
        if !(format_seen && version_seen) {
            return None;
        }
        Some(RawHeader {
            format: Format::Deathtensors,
            created_by,
            alignment,
            metadata: Some(metadata.unwrap_or_default()),
            tensors: tensors?,
            encryption: None,
            compression,
        })
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::{leading_digits, string_end, Parser};

    #[test]
    fn compressed_headers_take_the_fast_path() {
        let json = r#"{"format":"deathtensors","format_version":1,"alignment":64,"compression":{"codec":"zstd","level":3,"chunk_size":4096,"tensors":{"w":[1000,3136]}},"global_metadata":{},"tensors":{"w":{"dtype":"F32","shape":[1808],"data_offsets":[0,4136],"metadata":{}}}}"#;
        let raw = super::parse(json, crate::Format::Deathtensors, &crate::Limits::DEFAULT, &crate::Serial);
        let c = raw.and_then(|r| r.compression).map(|c| c.tensors);
        assert_eq!(c, Some(alloc::vec![("w".into(), alloc::vec![1000, 3136])]));
        // A repeated table is the full decoder's to report.
        let twice = json.replace(r#""w":[1000,3136]"#, r#""w":[1000,3136],"w":[1000,3136]"#);
        assert!(super::parse(&twice, crate::Format::Deathtensors, &crate::Limits::DEFAULT, &crate::Serial).is_none());
    }

    #[test]
    fn entries_our_encoder_writes_match_literally() {
        // Our encoder leaves out an empty `metadata`: such entries take the
        // literal match, not the object walk (which decoded a 20,000-tensor
        // header 15% slower).
        let limits = crate::Limits::DEFAULT;
        for entry in [
            r#"{"dtype":"F32","shape":[16],"data_offsets":[0,64]}"#,
            r#"{"dtype":"F32","shape":[16],"data_offsets":[0,64],"metadata":{}}"#,
            r#"{"dtype":"F32","shape":[16],"data_offsets":[0,64],"metadata":{"a":"b"}}"#,
            r#"{"dtype":"F32","shape":[16],"data_offsets":[0,64],"sha256":"0000000000000000000000000000000000000000000000000000000000000000"}"#,
        ] {
            let mut p = Parser { text: entry, bytes: entry.as_bytes(), at: 0, limits: &limits };
            let t = p.canonical_tensor(&crate::name::Name::default(), crate::Format::Deathtensors);
            assert!(t.is_some() && p.at == entry.len(), "{entry}");
        }
    }

    #[test]
    fn string_end_finds_the_first_quote_backslash_or_control() {
        let naive = |b: &[u8], from: usize| {
            b[from..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20).map(|i| from + i)
        };
        let specials = [b'"', b'\\', 0x00, 0x1f, 0x0a];
        let fillers = [b'a', 0x20, 0x7f, 0x80, 0xff, 0x21, 0x5b, 0x5d];
        for len in 0..40 {
            for &fill in &fillers {
                let mut bytes = alloc::vec![fill; len];
                for from in 0..=len.min(9) {
                    assert_eq!(string_end(&bytes, from), naive(&bytes, from));
                }
                for at in 0..len {
                    for &special in &specials {
                        bytes[at] = special;
                        for from in 0..=len.min(9) {
                            assert_eq!(string_end(&bytes, from), naive(&bytes, from), "{bytes:?} from {from}");
                        }
                        // A second match further on must not win.
                        if at + 3 < len {
                            bytes[at + 3] = b'"';
                            assert_eq!(string_end(&bytes, 0), naive(&bytes, 0));
                            bytes[at + 3] = fill;
                        }
                        bytes[at] = fill;
                    }
                }
            }
        }
    }

    #[test]
    fn leading_digits_matches_a_byte_at_a_time_count() {
        let naive = |b: &[u8]| {
            let n = b.iter().take(8).take_while(|c| c.is_ascii_digit()).count();
            (b[..n].iter().fold(0u64, |v, &c| v * 10 + u64::from(c - b'0')), n)
        };
        // Every byte value around every digit run, at every length, so each
        // flag, carry and shift is exercised.
        let others: alloc::vec::Vec<u8> = (0..=255u8).filter(|b| !b.is_ascii_digit()).collect();
        for len in 0..=12 {
            for run in 0..=len {
                for &other in &others {
                    let mut bytes: alloc::vec::Vec<u8> = (0..len).map(|i| b"9081726354"[i % 10]).collect();
                    if run < len {
                        bytes[run] = other;
                        if run + 1 < len {
                            bytes[run + 1] = 0xff; // a carry source above the first non-digit
                        }
                    }
                    assert_eq!(leading_digits(&bytes), naive(&bytes), "{bytes:?}");
                }
            }
        }
    }

    #[test]
    fn uint_takes_canonical_integers_only() {
        let limits = crate::Limits::DEFAULT;
        let uint = |text: &str| {
            let mut p = Parser { text, bytes: text.as_bytes(), at: 0, limits: &limits };
            p.uint().map(|v| (v, p.at))
        };
        for v in [0u64, 1, 9, 10, 99, 1_234_567, 12_345_678, 123_456_789, 1 << 53, u64::MAX] {
            for end in [",", "]", "}", " ", "\n", ",0000000000"] {
                let text = alloc::format!("{v}{end}");
                assert_eq!(uint(&text), Some((v, v.to_string().len())), "{text:?}");
            }
        }
        // Overflow, leading zeros, fractions, exponents, signs, no terminator.
        for text in [
            "18446744073709551616,",
            "99999999999999999999]",
            "01,",
            "00]",
            "012345678,",
            "1.5,",
            "1e3,",
            "-1,",
            "+1,",
            "12",
            "123456789",
            "x,",
            "",
        ] {
            assert_eq!(uint(text), None, "{text:?}");
        }
    }
}
