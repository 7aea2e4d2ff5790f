//! Compact JSON encoding of both header formats.
//!
//! Strings are escaped exactly as serde_json escapes them (`"`, `\`, and
//! control characters; nothing else), because the safetensors encoder must
//! reproduce safetensors' bytes, which come from serde_json.

use alloc::vec::Vec;

use crate::header::Header;
use crate::json::{escape, hex, metadata, uint};
use crate::tensor::{Format, Metadata, TensorInfo};

fn tensor(out: &mut Vec<u8>, t: &TensorInfo, format: Format) {
    escape(out, &t.name);
    out.extend_from_slice(b":{\"dtype\":\"");
    out.extend_from_slice(t.dtype.name().as_bytes());
    out.extend_from_slice(b"\",\"shape\":[");
    for (i, &d) in t.shape.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        uint(out, d);
    }
    out.extend_from_slice(b"],\"data_offsets\":[");
    uint(out, t.data_offsets.0);
    out.push(b',');
    uint(out, t.data_offsets.1);
    out.push(b']');
    if format == Format::Deathtensors {
        // Empty metadata is not written: readers (deathtensors 0.3.0 too)
        // read a missing `metadata` as empty, and a million tensors would
        // otherwise carry 14 MB of `,"metadata":{}`.
        if !t.metadata.is_empty() {
            out.extend_from_slice(b",\"metadata\":");
            metadata(out, &t.metadata);
        }
        if let Some(d) = &t.sha256 {
            out.extend_from_slice(b",\"sha256\":\"");
            hex(out, &d[..]);
            out.push(b'"');
        }
    }
    out.push(b'}');
}

/// The compact JSON text of a header, without padding.
pub(crate) fn json(h: &Header) -> Vec<u8> {
    json_after(h, 0)
}

/// [`json`] after `skip` zero bytes, for the caller to fill (a prefix), so
/// that a head is built in one buffer and the header text is never held
/// twice.
pub(crate) fn json_after(h: &Header, skip: usize) -> Vec<u8> {
    // About 100 bytes a tensor; one reservation avoids regrowing (and the
    // padding of a head rarely regrows it either).
    let mut out = Vec::with_capacity(skip + 320 + h.len() * 112);
    out.resize(skip, 0);
    match h.format() {
        Format::Deathtensors => {
            out.extend_from_slice(b"{\"format\":\"deathtensors\",\"format_version\":1");
            if let Some(c) = h.created_by() {
                out.extend_from_slice(b",\"created_by\":");
                escape(&mut out, c);
            }
            out.extend_from_slice(b",\"alignment\":");
            uint(&mut out, h.alignment());
            if let Some(enc) = h.encryption() {
                out.extend_from_slice(b",\"encryption\":");
                crate::crypt::encode(&mut out, enc);
            }
            if let Some(c) = h.compression() {
                out.extend_from_slice(b",\"compression\":");
                let tables = h
                    .tensors()
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| h.chunk_table(i).map(|table| (t.name.as_str(), table.stored_lens())));
                crate::compression::encode(&mut out, c, tables);
            }
            out.extend_from_slice(b",\"global_metadata\":");
            metadata(&mut out, h.metadata().unwrap_or(&Metadata::new()));
            out.extend_from_slice(b",\"tensors\":{");
            for (i, t) in h.tensors().iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                tensor(&mut out, t, Format::Deathtensors);
            }
            out.extend_from_slice(b"}}");
        }
        // bintensors headers are binary (`Head::encode`); as JSON, one reads
        // like a safetensors header of the same tensors.
        Format::Safetensors | Format::Bintensors => {
            out.push(b'{');
            let mut first = true;
            if let Some(m) = h.metadata() {
                out.extend_from_slice(b"\"__metadata__\":");
                metadata(&mut out, m);
                first = false;
            }
            for t in h.tensors() {
                if !first {
                    out.push(b',');
                }
                first = false;
                tensor(&mut out, t, Format::Safetensors);
            }
            out.push(b'}');
        }
    }
    out
}
