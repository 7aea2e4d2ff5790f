//! bintensors 0.2 heads that need no file on disk: what bintensors accepts
//! and we accept too, the errors' wording, and the option tag. Files are in
//! `fixtures` (valid) and `invalid` (hostile, `bt-*.bt`).

use deathtensors_format::{Dtype, ErrorKind, Flags, Format, Head, Header, Limits, TensorSpec};

/// A bintensors file from its encoded header (padded here) and data.
fn file(body: &[u8], data: &[u8]) -> Vec<u8> {
    let mut header = body.to_vec();
    header.resize(body.len().div_ceil(8) * 8, b' ');
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

#[track_caller]
fn check_err(bytes: &[u8], expected: &str) {
    let err = Head::parse(bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert_eq!(err.to_string(), expected);
}

#[test]
fn tensors_out_of_the_writers_order_are_read_in_header_order() {
    // I8 "b" before F32 "a": bintensors' writer would put F32 first, its
    // reader accepts the file, and so do we.
    let body = b"\x00\x02\x01b\x02\x01\x01\x00\x01\x01a\x0b\x01\x01\x01\x05";
    let bytes = file(body, &[7, 0, 0, 0, 0x40]);
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    assert_eq!(head.header.format(), Format::Bintensors);
    let names: Vec<&str> = head.header.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(head.header.get("a").unwrap().data_offsets, (1, 5));
    assert_eq!(head.data_start, 24);
    // Our encoder keeps a parsed header's order.
    assert_eq!(Head::encode(&head.header, Flags::EMPTY).unwrap(), bytes[..24]);
}

#[test]
fn errors_say_what_is_wrong_and_where() {
    let one = b"\x00\x01\x01a\x0b\x01\x02\x00\x08";
    let data = [0u8; 8];
    check_err(&file(one, &data[..4]), "tensor \"a\": data ends at 8, past the 4-byte data blob: the file is truncated (its header needs 32 bytes, it has 28)",
    );
    let mut garbage = file(one, &data);
    garbage[17] = b'X';
    check_err(
        &garbage,
        "invalid bintensors header: header padding is not spaces (bintensors pads its header with spaces) at byte 17",
    );
    let long = b"\x00\xfb\x01\x00\x01a\x0b\x01\x02\x00\x08";
    check_err(
        &file(long, &data),
        "invalid bintensors header: tensor count is a varint longer than its shortest form (bincode writes the \
         shortest) at byte 9",
    );
    let dtype = b"\x00\x01\x01a\x0f\x01\x02\x00\x08";
    check_err(&file(dtype, &data), "tensor \"a\": unknown dtype \"bintensors dtype index 15\" at byte 12");
    let gap = b"\x00\x02\x01a\x0b\x01\x02\x00\x08\x01b\x0b\x01\x02\x0c\x14";
    check_err(
        &file(gap, &[0; 20]),
        "tensor \"b\": data starts at 12 but the layout puts it at 8 (hole in the data blob)",
    );
}

#[test]
fn the_metadata_option_tag_is_0_or_1() {
    // A file with another tag is not recognised as bintensors at all; the
    // header decoder names the tag.
    let err = Header::parse_bintensors(b"\x02\x00      ", &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidBintensors { what: "metadata option tag", .. }), "{err}");
    assert_eq!(err.offset(), Some(0));
    let bytes = file(b"\x02\x00", &[]);
    let err = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::UnrecognizedFormat { .. }), "{err}");
}

#[test]
fn the_encoder_refuses_what_bintensors_would_not_read() {
    // bincode's budget: 1 + 8 + 72 * n must stay within 100,000,000, so
    // 1,388,888 tensors read and one more does not (checked with the wheel).
    let limits = Limits { max_tensors: u64::MAX, ..Limits::DEFAULT };
    let specs = |n: usize| (0..n).map(|i| TensorSpec::new(format!("{i}"), Dtype::U8, [0])).collect::<Vec<_>>();
    let ok = Header::new_bintensors(specs(1_388_888), None, &limits).unwrap();
    let head = Head::encode(&ok, Flags::EMPTY).unwrap();
    Head::parse(&head, head.len() as u64, &limits).unwrap();
    let over = Header::new_bintensors(specs(1_388_889), None, &limits).unwrap();
    let err = Head::encode(&over, Flags::EMPTY).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { what: "bincode decode budget", .. }), "{err}");
    let err = Head::encode(&ok, Flags::CHECKSUM).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Unsupported { .. }), "{err}");
}
