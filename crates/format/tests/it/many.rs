//! Headers of a million tensors (issue 51): they encode and parse under the
//! default limits, are no longer than safetensors' for the same tensors
//! but for the fixed fields, and find one tensor by name.

use deathtensors_format::{
    Dtype, ErrorKind, Flags, Head, Header, Limits, Metadata, TensorSpec, SAFETENSORS_MAX_HEADER,
};

const N: usize = 1_000_000;

/// `n` tensors of `[4]` F32 with names like a mixture of experts' scales.
fn specs(n: usize) -> Vec<TensorSpec> {
    (0..n)
        .map(|i| TensorSpec::new(format!("model.layers.{}.block.{}.weight", i / 1000, i % 1000), Dtype::F32, [4]))
        .collect()
}

/// A whole file of `head` followed by a zero blob of `data_len` bytes.
fn file(mut head: Vec<u8>, data_len: u64) -> Vec<u8> {
    head.resize(head.len() + data_len as usize, 0);
    head
}

#[test]
fn a_million_tensors_roundtrip_and_fit_in_safetensors_size() {
    let dt = Header::new_deathtensors(specs(N), Metadata::new(), 1, None, &Limits::DEFAULT).unwrap();
    let st = Header::new_safetensors(specs(N), None, &Limits::DEFAULT).unwrap();
    let dt_head = Head::encode(&dt, Flags::EMPTY).unwrap();
    let st_head = Head::encode(&st, Flags::EMPTY).unwrap();
    // Per tensor the same bytes; the difference is the fixed fields
    // (`format`, `format_version`, `alignment`, `global_metadata`, the
    // 24-byte prefix and padding to 64), under 200 bytes.
    assert!(dt_head.len() <= st_head.len() + 200, "{} vs {}", dt_head.len(), st_head.len());
    assert!(!dt_head.windows(13).any(|w| w == b"\"metadata\":{}"), "empty per-tensor metadata written");
    // alignment 1 packs the tensors: no padding between them.
    assert_eq!(dt.data_len(), 16 * N as u64);

    let bytes = file(dt_head, dt.data_len());
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    assert_eq!(head.header.len(), N);
    let t = head.header.get("model.layers.999.block.998.weight").unwrap();
    assert_eq!(t.data_offsets, (16 * 999_998, 16 * 999_999));
    assert!(head.header.get("model.layers.1000.block.0.weight").is_none());
    assert_eq!(head.header, dt);
}

#[test]
fn a_header_past_the_limit_or_the_file_is_refused_before_it_is_read() {
    let h = Header::new_deathtensors(specs(1000), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let bytes = file(Head::encode(&h, Flags::EMPTY).unwrap(), h.data_len());
    let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let tight = Limits { max_header_len: len - 1, ..Limits::DEFAULT };
    let err = Head::parse(&bytes, bytes.len() as u64, &tight).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { what: "header length", .. }), "{err}");
    // Within the default limit (4 GiB) but longer than the file: truncated,
    // from the first 24 bytes alone.
    let mut hostile = bytes[..24].to_vec();
    hostile[16..24].copy_from_slice(&(3u64 << 30).to_le_bytes());
    let err = Head::parse(&hostile, hostile.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Truncated { .. }), "{err}");
}

#[test]
fn a_safetensors_header_past_safetensors_cap_is_refused_with_the_way_out() {
    // 100,000 tensors with 1,000-byte names need a header over 100,000,000
    // bytes (as 1.1 M with the names above do, but cheaper to build).
    let long = (0..100_000).map(|i| TensorSpec::new(format!("{i:01000}"), Dtype::F32, [4])).collect();
    let st = Header::new_safetensors(long, None, &Limits::DEFAULT).unwrap();
    let err = Head::encode(&st, Flags::EMPTY).unwrap_err();
    let ErrorKind::SafetensorsHeaderCap { len } = *err.kind() else { panic!("{err}") };
    assert!(len > SAFETENSORS_MAX_HEADER);
    let message = err.to_string();
    assert!(message.contains("safetensors' cap of 100000000 bytes"), "{message}");
    assert!(message.contains("deathtensors format"), "{message}");
}
