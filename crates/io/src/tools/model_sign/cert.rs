//! Certificate mode: the bundle's X.509 chain is checked with
//! `rustls-webpki` against the certificates the verifier trusts, at the
//! signing certificate's notBefore (as `model_signing` checks it, so a
//! signature outlives its certificate), and the signature with the
//! signing certificate's key. The signing certificate must allow
//! signing: KeyUsage digitalSignature, or ExtendedKeyUsage codeSigning.

use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyPurposeIdIter};

use crate::error::{Error, ErrorKind, Result};

pub(super) fn error(path: &Path, message: String) -> Error {
    Error::new(ErrorKind::InvalidKey(message), Some(path), "cannot read the certificate")
}

/// The DER of every certificate in these PEM files, in order.
pub(super) fn read_pem_certificates(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for path in paths {
        let text = std::fs::read(path).map_err(|e| Error::io(e, path, "cannot read the certificate"))?;
        let before = out.len();
        for cert in CertificateDer::pem_slice_iter(&text) {
            let cert = cert.map_err(|e| error(path, format!("not a PEM certificate: {e}")))?;
            out.push(cert.as_ref().to_vec());
        }
        if out.len() == before {
            return Err(error(path, "no PEM certificate (\"BEGIN CERTIFICATE\") in the file".into()));
        }
    }
    Ok(out)
}

/// The fields of a certificate this module needs.
#[derive(Debug)]
pub(super) struct Fields {
    pub(super) not_before: u64,
    pub(super) spki: Vec<u8>,
    /// KeyUsage digitalSignature, or ExtendedKeyUsage codeSigning.
    pub(super) may_sign: bool,
}

/// One DER element: tag, contents, and what follows.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize), &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s[..2].parse().ok()?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s[..4].parse().ok()?, &s[4..]),
        _ => return None,
    };
    let n = |i: usize| -> Option<i64> { rest.get(i..i + 2)?.parse().ok() };
    let secs = days_from_civil(year, n(0)?, n(2)?) * 86400 + n(4)? * 3600 + n(6)? * 60 + n(8)?;
    u64::try_from(secs).ok()
}

const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// Takes the next DER element of `input`: its tag and contents.
fn take<'a>(input: &mut &'a [u8]) -> Option<(u8, &'a [u8])> {
    let (tag, v, rest) = element(input)?;
    *input = rest;
    Some((tag, v))
}

/// Reads a certificate's validity start, public key and signing usage.
pub(super) fn parse(der: &[u8]) -> std::result::Result<Fields, String> {
    let bad = || "a malformed X.509 certificate".to_string();
    let (_, cert, _) = element(der).ok_or_else(bad)?;
    let (_, mut tbs, _) = element(cert).ok_or_else(bad)?;
    let tbs = &mut tbs;
    let (tag, _) = take(tbs).ok_or_else(bad)?;
    if tag == 0xa0 {
        take(tbs).ok_or_else(bad)?; // serial, after the version
    }
    take(tbs).ok_or_else(bad)?; // signature algorithm
    take(tbs).ok_or_else(bad)?; // issuer
    let (_, validity) = take(tbs).ok_or_else(bad)?;
    let (t, v, _) = element(validity).ok_or_else(bad)?;
    let not_before = time(t, v).ok_or_else(bad)?;
    take(tbs).ok_or_else(bad)?; // subject
    let spki_start: &[u8] = tbs;
    take(tbs).ok_or_else(bad)?;
    let spki = spki_start[..spki_start.len() - tbs.len()].to_vec();
    let mut may_sign = false;
    while let Some((tag, v)) = take(tbs) {
        if tag != 0xa3 {
            continue;
        }
        let (_, mut exts, _) = element(v).ok_or_else(bad)?;
        while let Some((_, mut ext)) = take(&mut exts) {
            let (_, oid) = take(&mut ext).ok_or_else(bad)?;
            let (mut t, mut value) = take(&mut ext).ok_or_else(bad)?;
            if t == 0x01 {
                // `critical`, then the value.
                (t, value) = take(&mut ext).ok_or_else(bad)?;
            }
            if t != 0x04 {
                return Err(bad());
            }
            if oid == KEY_USAGE {
                // BIT STRING: unused-bits byte, then bits; bit 0
                // (digitalSignature) is the first byte's top bit.
                let (_, bits, _) = element(value).ok_or_else(bad)?;
                may_sign |= bits.get(1).is_some_and(|b| b & 0x80 != 0);
            } else if oid == EXT_KEY_USAGE {
                let (_, mut purposes, _) = element(value).ok_or_else(bad)?;
                while let Some((_, p)) = take(&mut purposes) {
                    may_sign |= p == CODE_SIGNING;
                }
            }
        }
    }
    Ok(Fields { not_before, spki, may_sign })
}

/// Accepts any extended key usage: [`parse`] checks the signing usage
/// as `model_signing` does (KeyUsage or ExtendedKeyUsage).
struct AnyUsage;

impl webpki::ExtendedKeyUsageValidator for AnyUsage {
    fn validate(&self, _: KeyPurposeIdIter<'_, '_>) -> std::result::Result<(), webpki::Error> {
        Ok(())
    }
}

/// Checks `chain` (DER, signing certificate first) against `roots`, then
/// `sig` of `message` with the signing certificate's key.
pub(super) fn verify_chain_signature(
    roots: &[Vec<u8>],
    chain: &[Vec<u8>],
    message: &[u8],
    sig: &[u8],
) -> std::result::Result<(), String> {
    let ders: Vec<CertificateDer<'_>> = chain.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
    let root_ders: Vec<CertificateDer<'_>> = roots.iter().map(|c| CertificateDer::from(c.as_slice())).collect();
    let anchors: Vec<_> = root_ders
        .iter()
        .map(webpki::anchor_from_trusted_cert)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| format!("a trusted certificate cannot be used as a root: {e}"))?;
    let signing = parse(&chain[0]).map_err(|m| format!("the signing certificate: {m}"))?;
    let ee = EndEntityCert::try_from(&ders[0]).map_err(|e| format!("the signing certificate is malformed: {e}"))?;
    let algs = [
        webpki::ring::ECDSA_P256_SHA256,
        webpki::ring::ECDSA_P384_SHA384,
        webpki::ring::ECDSA_P256_SHA384,
        webpki::ring::ECDSA_P384_SHA256,
        webpki::ring::ED25519,
    ];
    ee.verify_for_usage(
        &algs,
        &anchors,
        &ders[1..],
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(signing.not_before)),
        AnyUsage,
        None,
        None,
    )
    .map_err(|e| format!("the signing certificate does not chain to a trusted certificate: {e}"))?;
    if !signing.may_sign {
        return Err("the signing certificate cannot be used for signing (neither KeyUsage digitalSignature nor \
                    ExtendedKeyUsage codeSigning)"
            .into());
    }
    let key = super::keys::EcPublicKey::from_spki(&signing.spki)
        .map_err(|m| format!("the signing certificate's key: {m}"))?;
    if !key.verifies(message, sig) {
        return Err("the signature does not verify with the signing certificate's key (the bundle was modified)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_unix_seconds() {
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"240229120000Z"), Some(1_709_208_000));
        assert_eq!(time(0x18, b"20491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x17, b"2402291200Z"), None);
        assert_eq!(time(0x17, b"240229120000"), None);
    }

    #[test]
    fn der_lengths_are_bounded_by_the_input() {
        assert_eq!(element(&[0x30, 0x03, 1, 2]), None);
        assert_eq!(element(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(element(&[0x04, 0x81, 0x01, 9]), Some((0x04, &[9u8][..], &[][..])));
        assert!(parse(&[0x30, 0x00]).is_err());
    }
}
