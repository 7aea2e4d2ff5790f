//! Compact JSON encoding of both header formats.
//!
//! Strings are escaped exactly as serde_json escapes them (`"`, `\`, and
//! control characters; nothing else), because the safetensors encoder must
//! reproduce safetensors' bytes, which come from serde_json.

use alloc::vec::Vec;

use crate::header::{Format, Header, Metadata, TensorInfo};

/// serde_json's escape table for bytes below 0x20.
fn escape(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => &[],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn uint(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn metadata(out: &mut Vec<u8>, m: &Metadata) {
    out.push(b'{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        escape(out, k);
        out.push(b':');
        escape(out, v);
    }
    out.push(b'}');
}

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
        out.extend_from_slice(b",\"metadata\":");
        metadata(out, &t.metadata);
        if let Some(d) = &t.sha256 {
            out.extend_from_slice(b",\"sha256\":\"");
            hex(out, d);
            out.push(b'"');
        }
    }
    out.push(b'}');
}

/// Appends the lowercase hex digits of `bytes`.
pub(crate) fn hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 0xf) as usize]);
    }
}

/// The compact JSON text of a header, without padding.
pub(crate) fn json(h: &Header) -> Vec<u8> {
    // About 100 bytes a tensor; one reservation avoids regrowing.
    let mut out = Vec::with_capacity(256 + h.len() * 112);
    match h.format() {
        Format::Deathtensors => {
            out.extend_from_slice(b"{\"format\":\"deathtensors\",\"format_version\":1");
            if let Some(c) = h.created_by() {
                out.extend_from_slice(b",\"created_by\":");
                escape(&mut out, c);
            }
            out.extend_from_slice(b",\"alignment\":");
            uint(&mut out, h.alignment());
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
        Format::Safetensors => {
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
