//! bintensors 0.2 headers: bincode 2 of `(Option<metadata map>, list of
//! (name, dtype, shape, (begin, end)))`, padded with spaces to a multiple of
//! 8 bytes (`docs/FORMAT.md`, "bintensors files").
//!
//! The decoder refuses everything bintensors 0.2's reader refuses (with its
//! header cap and bincode's decode budget), and, as for safetensors, what
//! our formats refuse: duplicate tensor names and bad names. It is stricter
//! than bintensors only where bintensors' own writer never writes what is
//! refused: varints longer than their shortest form, metadata keys repeated
//! or out of order, and anything but the writer's padding after the encoded
//! header. So a head we accept is byte for byte the head our encoder (and
//! bintensors') writes for its header.

use alloc::string::String;
use alloc::vec::Vec;

use crate::reader::Reader;
use crate::tensor::{check_name, Metadata, TensorInfo};
use crate::varint::{self, Claims};
use crate::{Dtype, Error, ErrorKind, Limits, Result, BINTENSORS_MAX_HEADER};

/// bintensors' dtypes, by the index its files store.
const DTYPES: [Dtype; 15] = [
    Dtype::BOOL,
    Dtype::U8,
    Dtype::I8,
    Dtype::F8_E5M2,
    Dtype::F8_E4M3,
    Dtype::I16,
    Dtype::U16,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::U32,
    Dtype::F32,
    Dtype::F64,
    Dtype::I64,
    Dtype::U64,
];

/// The index bintensors stores for `dtype`, if it has the dtype.
pub(crate) fn dtype_index(dtype: Dtype) -> Option<u8> {
    DTYPES.iter().position(|&d| d == dtype).map(|i| i as u8)
}

// Here, beside bintensors' table, which it reads: `tensor.rs` (below this
// module) defines `Format`.
impl crate::tensor::Format {
    /// Whether files of this format can hold tensors of `dtype`: ours hold
    /// every dtype, safetensors 0.8 all but complex128 (its readers refuse
    /// the file), bintensors those of its table.
    pub fn holds(self, dtype: Dtype) -> bool {
        match self {
            crate::tensor::Format::Deathtensors => true,
            crate::tensor::Format::Safetensors => dtype != Dtype::C128,
            crate::tensor::Format::Bintensors => dtype_index(dtype).is_some(),
        }
    }
}

/// The header pads with this byte to a multiple of [`PAD_TO`].
const PAD: u8 = b' ';
const PAD_TO: usize = 8;

// What bincode claims of its budget (`varint::Claims`) for the in-memory
// values bintensors decodes into, on 64-bit targets: `(String, String)`,
// `(String, TensorInfo)`, a `usize` (also every varint: counts, lengths,
// dimensions, offsets), a u32 (the dtype index) and a u8 (the option tag).
const CLAIM_METADATA_ENTRY: u64 = 48;
const CLAIM_TENSOR_ENTRY: u64 = 72;
const CLAIM_USIZE: u64 = 8;
const CLAIM_DTYPE: u64 = 4;
const CLAIM_TAG: u64 = 1;

/// The smallest encoded tensor entry: name length, one name byte, dtype,
/// rank, two offsets. Bounds the tensor count by the input before allocating.
const MIN_ENTRY: usize = 6;

/// A decoded bintensors header, before its layout is checked.
pub(crate) struct Decoded {
    pub(crate) metadata: Option<Metadata>,
    /// In header order (which is also the order of their data).
    pub(crate) tensors: Vec<TensorInfo>,
}

/// Decodes the `N` header bytes of a bintensors file (after the 8-byte
/// length), padding included. Offsets in errors are within `bytes`.
pub(crate) fn decode(bytes: &[u8], limits: &Limits) -> Result<Decoded> {
    let cap = limits.max_header_len.min(BINTENSORS_MAX_HEADER);
    if bytes.len() as u64 > cap {
        return Err(Error::limit("header length", bytes.len() as u64, cap));
    }
    let mut r = Reader::new(bytes);
    let mut claims = Claims::new();
    let metadata = metadata(&mut r, &mut claims)?;
    let tensors = tensors(&mut r, &mut claims, limits)?;
    check_padding(bytes, r.pos())?;
    Ok(Decoded { metadata, tensors })
}

fn metadata(r: &mut Reader<'_>, claims: &mut Claims) -> Result<Option<Metadata>> {
    let at = r.pos() as u64;
    claims.claim(CLAIM_TAG).map_err(|e| e.at_offset(at))?;
    match r.u8("metadata option tag")? {
        0 => return Ok(None),
        1 => {}
        _ => {
            return Err(varint::invalid("metadata option tag", "neither 0x00 (no metadata) nor 0x01 (a map)", at));
        }
    }
    let count = count(r, claims, CLAIM_METADATA_ENTRY, 2, "metadata entry count")?;
    let mut map = Metadata::new();
    for _ in 0..count {
        claims.release(CLAIM_METADATA_ENTRY);
        let key_at = r.pos() as u64;
        let key = string(r, claims, "metadata key")?;
        let value = string(r, claims, "metadata value")?;
        // The writer writes keys from a sorted map: each after the last.
        match map.last_key_value().map(|(last, _)| key.as_str().cmp(last)) {
            Some(core::cmp::Ordering::Equal) => {
                let kind = ErrorKind::DuplicateKey { within: "metadata", key: key.as_str().into() };
                return Err(Error::at(kind, key_at));
            }
            Some(core::cmp::Ordering::Less) => {
                return Err(varint::invalid("metadata key", "out of the byte order bintensors writes keys in", key_at));
            }
            _ => {}
        }
        map.insert(key, value);
    }
    Ok(Some(map))
}

fn tensors(r: &mut Reader<'_>, claims: &mut Claims, limits: &Limits) -> Result<Vec<TensorInfo>> {
    let at = r.pos() as u64;
    let n = count(r, claims, CLAIM_TENSOR_ENTRY, MIN_ENTRY, "tensor count")?;
    if n > limits.max_tensors {
        return Err(Error::limit("tensor count", n, limits.max_tensors).at_offset(at));
    }
    // `count` bounded `n` by the bytes left, so this allocation is too.
    let mut tensors = Vec::with_capacity(n as usize);
    for _ in 0..n {
        claims.release(CLAIM_TENSOR_ENTRY);
        tensors.push(tensor(r, claims, limits)?);
    }
    Ok(tensors)
}

fn tensor(r: &mut Reader<'_>, claims: &mut Claims, limits: &Limits) -> Result<TensorInfo> {
    let at = r.pos() as u64;
    let name = string(r, claims, "tensor name")?;
    let located = |e: Error| e.with_tensor(&name);
    check_name(&name, limits).map_err(|e| located(e.at_offset(at)))?;
    let at = r.pos() as u64;
    claims.claim(CLAIM_DTYPE).map_err(|e| located(e.at_offset(at)))?;
    let index = varint::read(r, "dtype").map_err(located)?;
    let dtype = usize::try_from(index).ok().and_then(|i| DTYPES.get(i)).copied().ok_or_else(|| {
        let kind = ErrorKind::UnknownDtype(alloc::format!("bintensors dtype index {index}").into());
        located(Error::at(kind, at))
    })?;
    let at = r.pos() as u64;
    let rank = count(r, claims, CLAIM_USIZE, 1, "tensor rank").map_err(located)?;
    if rank > limits.max_rank {
        return Err(located(Error::limit("tensor rank", rank, limits.max_rank).at_offset(at)));
    }
    let mut shape = Vec::with_capacity(rank as usize);
    for _ in 0..rank {
        // The element's claim is given back and claimed again: no change.
        shape.push(varint::read(r, "shape dimension").map_err(located)?);
    }
    let at = r.pos() as u64;
    claims.claim(2 * CLAIM_USIZE).map_err(|e| located(e.at_offset(at)))?;
    let begin = varint::read(r, "data offset").map_err(located)?;
    let end = varint::read(r, "data offset").map_err(located)?;
    Ok(TensorInfo {
        name: name.into(),
        dtype,
        shape: shape.into(),
        data_offsets: (begin, end),
        metadata: Metadata::new(),
        sha256: None,
    })
}

/// Reads a list's element count, claims the list, and checks that the bytes
/// left can hold that many elements of at least `min_size` bytes each.
fn count(r: &mut Reader<'_>, claims: &mut Claims, claim: u64, min_size: usize, what: &'static str) -> Result<u64> {
    let at = r.pos() as u64;
    claims.claim(CLAIM_USIZE).map_err(|e| e.at_offset(at))?;
    let n = varint::read(r, what)?;
    claims.claim_list(n, claim).map_err(|e| e.at_offset(at))?;
    let fits = (r.remaining() / min_size) as u64;
    if n > fits {
        let needed = n.saturating_mul(min_size as u64).saturating_add(r.pos() as u64);
        return Err(Error::truncated(what, needed, (r.pos() + r.remaining()) as u64).at_offset(at));
    }
    Ok(n)
}

fn string(r: &mut Reader<'_>, claims: &mut Claims, what: &'static str) -> Result<String> {
    let at = r.pos() as u64;
    claims.claim(CLAIM_USIZE).map_err(|e| e.at_offset(at))?;
    let len = varint::read(r, what)?;
    claims.claim(len).map_err(|e| e.at_offset(at))?;
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let start = r.pos() as u64;
    let bytes = r.take(len, what)?;
    match core::str::from_utf8(bytes) {
        Ok(s) => Ok(s.into()),
        Err(e) => Err(Error::at(ErrorKind::InvalidUtf8, start + e.valid_up_to() as u64)),
    }
}

/// The bytes after the encoded header must be the writer's padding: spaces
/// up to the next multiple of 8, no more and no fewer. bintensors' reader
/// ignores whatever is there, which could hide anything in a file.
fn check_padding(bytes: &[u8], used: usize) -> Result<()> {
    let rest = bytes.get(used..).unwrap_or(&[]);
    if let Some(i) = rest.iter().position(|&b| b != PAD) {
        return Err(varint::invalid(
            "header padding",
            "not spaces (bintensors pads its header with spaces)",
            (used + i) as u64,
        ));
    }
    if rest.len() != padding(used) {
        return Err(varint::invalid(
            "header padding",
            "not the 0 to 7 spaces that end the header at a multiple of 8 bytes",
            used as u64,
        ));
    }
    Ok(())
}

fn padding(len: usize) -> usize {
    (PAD_TO - len % PAD_TO) % PAD_TO
}

/// Encodes a bintensors head (8-byte length, header, padding) exactly as
/// bintensors 0.2 writes it for these tensors, in this order.
///
/// # Errors
/// - `UnsupportedDtype` for a dtype bintensors lacks, naming the tensor.
/// - `LimitExceeded` if the header is longer than [`BINTENSORS_MAX_HEADER`]
///   or its decoding would pass bincode's budget: bintensors would refuse
///   to read the file (its writer does not check).
pub(crate) fn encode(metadata: Option<&Metadata>, tensors: &[TensorInfo]) -> Result<Vec<u8>> {
    let mut claims = Claims::new();
    let mut out = Vec::with_capacity(8 + 16 + tensors.len() * 48);
    out.extend_from_slice(&[0; 8]);
    claims.claim(CLAIM_TAG)?;
    match metadata {
        None => out.push(0),
        Some(m) => {
            out.push(1);
            claims.claim(CLAIM_USIZE)?;
            claims.claim_list(m.len() as u64, CLAIM_METADATA_ENTRY)?;
            varint::write(&mut out, m.len() as u64);
            for (k, v) in m {
                claims.release(CLAIM_METADATA_ENTRY);
                put_string(&mut out, &mut claims, k)?;
                put_string(&mut out, &mut claims, v)?;
            }
        }
    }
    claims.claim(CLAIM_USIZE)?;
    claims.claim_list(tensors.len() as u64, CLAIM_TENSOR_ENTRY)?;
    varint::write(&mut out, tensors.len() as u64);
    for t in tensors {
        claims.release(CLAIM_TENSOR_ENTRY);
        let located = |e: Error| e.with_tensor(&t.name);
        let Some(index) = dtype_index(t.dtype) else {
            return Err(unsupported(t.dtype).with_tensor(&t.name));
        };
        put_string(&mut out, &mut claims, &t.name).map_err(located)?;
        claims.claim(CLAIM_DTYPE).map_err(located)?;
        out.push(index);
        claims.claim(CLAIM_USIZE).map_err(located)?;
        claims.claim_list(t.shape.len() as u64, CLAIM_USIZE).map_err(located)?;
        varint::write(&mut out, t.shape.len() as u64);
        for &d in &t.shape {
            varint::write(&mut out, d);
        }
        claims.claim(2 * CLAIM_USIZE).map_err(located)?;
        varint::write(&mut out, t.data_offsets.0);
        varint::write(&mut out, t.data_offsets.1);
    }
    out.resize(out.len() + padding(out.len() - 8), PAD);
    let n = (out.len() - 8) as u64;
    if n > BINTENSORS_MAX_HEADER {
        return Err(Error::limit("header length", n, BINTENSORS_MAX_HEADER));
    }
    out[..8].copy_from_slice(&n.to_le_bytes());
    Ok(out)
}

fn put_string(out: &mut Vec<u8>, claims: &mut Claims, s: &str) -> Result<()> {
    claims.claim(CLAIM_USIZE)?;
    claims.claim(s.len() as u64)?;
    varint::write(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// The error for a dtype bintensors cannot store.
pub(crate) fn unsupported(dtype: Dtype) -> Error {
    Error::new(ErrorKind::UnsupportedDtype { dtype: dtype.name(), format: "bintensors" })
}
