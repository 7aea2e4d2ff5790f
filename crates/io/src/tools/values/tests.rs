use deathtensors_format::Dtype;

use super::*;

#[track_caller]
fn check(dtype: Dtype, bytes: &[u8], expected: f64) {
    let mut out = Vec::new();
    decode(dtype, bytes, &mut out);
    assert_eq!(out.len(), 1, "{dtype} {bytes:02x?}");
    let got = out[0];
    if expected.is_nan() {
        assert!(got.is_nan(), "{dtype} {bytes:02x?}: {got}");
    } else {
        assert_eq!(got, expected, "{dtype} {bytes:02x?}");
        assert_eq!(got.is_sign_negative(), expected.is_sign_negative(), "{dtype} {bytes:02x?}: sign of {got}");
    }
}

#[test]
fn integers_and_bool() {
    check(Dtype::BOOL, &[0], 0.0);
    check(Dtype::BOOL, &[1], 1.0);
    check(Dtype::U8, &[255], 255.0);
    check(Dtype::I8, &[0x80], -128.0);
    check(Dtype::U16, &[0x34, 0x12], 4660.0);
    check(Dtype::I16, &[0xff, 0xff], -1.0);
    check(Dtype::U32, &[0, 0, 0, 0x80], 2147483648.0);
    check(Dtype::I32, &[0xfe, 0xff, 0xff, 0xff], -2.0);
    check(Dtype::U64, &[1, 0, 0, 0, 0, 0, 0, 0], 1.0);
    check(Dtype::I64, &(-5i64).to_le_bytes(), -5.0);
    assert_eq!(value(Dtype::U64, &u64::MAX.to_le_bytes()), Some(Value::Unsigned(u64::MAX)));
    assert_eq!(value(Dtype::I64, &i64::MIN.to_le_bytes()), Some(Value::Signed(i64::MIN)));
    assert_eq!(value(Dtype::BOOL, &[1]), Some(Value::Bool(true)));
}

#[test]
fn ieee_and_brain_floats() {
    check(Dtype::BF16, &0x3F80u16.to_le_bytes(), 1.0);
    check(Dtype::BF16, &0xC000u16.to_le_bytes(), -2.0);
    check(Dtype::BF16, &0x7F80u16.to_le_bytes(), f64::INFINITY);
    check(Dtype::F16, &0x3C00u16.to_le_bytes(), 1.0);
    check(Dtype::F16, &0x7BFFu16.to_le_bytes(), 65504.0);
    check(Dtype::F16, &0x0001u16.to_le_bytes(), 2f64.powi(-24));
    check(Dtype::F16, &0x7E00u16.to_le_bytes(), f64::NAN);
    check(Dtype::F32, &1.5f32.to_le_bytes(), 1.5);
    check(Dtype::F64, &(-0.0f64).to_le_bytes(), -0.0);
}

#[test]
fn f8_e4m3fn() {
    check(Dtype::F8_E4M3, &[0x38], 1.0);
    check(Dtype::F8_E4M3, &[0x7E], 448.0);
    check(Dtype::F8_E4M3, &[0xFE], -448.0);
    check(Dtype::F8_E4M3, &[0x7F], f64::NAN);
    check(Dtype::F8_E4M3, &[0xFF], f64::NAN);
    // S.1111.000 is a number in E4M3FN, not an infinity.
    check(Dtype::F8_E4M3, &[0x78], 256.0);
    check(Dtype::F8_E4M3, &[0x01], 2f64.powi(-9));
    check(Dtype::F8_E4M3, &[0x80], -0.0);
}

#[test]
fn f8_e5m2() {
    check(Dtype::F8_E5M2, &[0x3C], 1.0);
    check(Dtype::F8_E5M2, &[0x7C], f64::INFINITY);
    check(Dtype::F8_E5M2, &[0xFC], f64::NEG_INFINITY);
    check(Dtype::F8_E5M2, &[0x7D], f64::NAN);
    check(Dtype::F8_E5M2, &[0x7B], 57344.0);
    check(Dtype::F8_E5M2, &[0x01], 2f64.powi(-16));
}

#[test]
fn f8_e8m0() {
    check(Dtype::F8_E8M0, &[127], 1.0);
    check(Dtype::F8_E8M0, &[128], 2.0);
    check(Dtype::F8_E8M0, &[0], 2f64.powi(-127));
    check(Dtype::F8_E8M0, &[0xFE], 2f64.powi(127));
    check(Dtype::F8_E8M0, &[0xFF], f64::NAN);
}

#[test]
fn f8_fnuz() {
    check(Dtype::F8_E4M3FNUZ, &[0x40], 1.0);
    check(Dtype::F8_E4M3FNUZ, &[0x7F], 240.0);
    check(Dtype::F8_E4M3FNUZ, &[0xFF], -240.0);
    check(Dtype::F8_E4M3FNUZ, &[0x80], f64::NAN);
    check(Dtype::F8_E4M3FNUZ, &[0x00], 0.0);
    check(Dtype::F8_E5M2FNUZ, &[0x40], 1.0);
    check(Dtype::F8_E5M2FNUZ, &[0x7F], 57344.0);
    check(Dtype::F8_E5M2FNUZ, &[0x80], f64::NAN);
    check(Dtype::F8_E5M2FNUZ, &[0x01], 2f64.powi(-17));
}

#[test]
fn complex_gives_two_components() {
    let mut bytes = 1.0f32.to_le_bytes().to_vec();
    bytes.extend((-2.0f32).to_le_bytes());
    let mut out = Vec::new();
    decode(Dtype::C64, &bytes, &mut out);
    assert_eq!(out, [1.0, -2.0]);
    assert_eq!(value(Dtype::C64, &bytes), Some(Value::Complex(1.0, -2.0)));
    assert_eq!(components(Dtype::C128), 2);
    assert_eq!(element_size(Dtype::C128), Some(16));
}

#[test]
fn sub_byte_dtypes_are_not_decoded() {
    for dtype in [Dtype::F4, Dtype::F6_E2M3, Dtype::F6_E3M2] {
        assert_eq!(element_size(dtype), None);
        assert_eq!(value(dtype, &[0, 0, 0]), None);
        let mut out = Vec::new();
        decode(dtype, &[0, 0, 0], &mut out);
        assert!(out.is_empty());
    }
}
