//! The reading commands' promise: every tensor that carries a SHA-256 is
//! checked before its values are printed, summarised, compared or written
//! elsewhere, so a damaged file fails (exit 1, the tensor named) instead of
//! passing its damage on.
//!
//! Commands that copy tensors (`convert`, `decrypt`, `meta`, `blob append`)
//! check each tensor as it streams through the copy
//! (`deathtensors_io::copy_tensors`), which commits nothing that failed;
//! commands that read in windows or more than once (`cat`, `stats`, `diff`,
//! `encrypt`) check the tensors they read first, here, on all cores. A file
//! whose only check is its SHA-256 footer (no per-tensor digests) has the
//! footer checked instead. Encrypted tensors are authenticated by their tags
//! as they are decrypted.

use deathtensors_io::Reader;

use crate::progress;

/// Checks `names` of `reader` before they are read: their digests, or the
/// footer when one of them has no digest and the file has a footer.
///
/// # Errors
/// `TensorDigestMismatch` naming the tensor, `ChecksumMismatch` for the
/// footer; the reads' errors.
pub fn check(reader: &Reader, names: &[&str]) -> deathtensors_io::Result<()> {
    let header = reader.header();
    let with_digest: Vec<&str> =
        names.iter().copied().filter(|n| header.get(n).is_some_and(|t| t.sha256.is_some())).collect();
    let total = with_digest.iter().filter_map(|n| header.get(n)).map(|t| t.byte_len()).sum();
    let bar = progress::bar(total, "checking");
    reader.check_tensors(&with_digest, |n| bar.inc(n))?;
    bar.finish_and_clear();
    if with_digest.len() < names.len() {
        footer(reader)?;
    }
    Ok(())
}

/// Checks the footer of a file that has one, for tensors without a digest
/// of their own (deathtensors 0.3.0 files with only a footer, say).
///
/// # Errors
/// `ChecksumMismatch`; the reads' errors.
pub fn footer(reader: &Reader) -> deathtensors_io::Result<()> {
    if !reader.has_footer() {
        return Ok(());
    }
    let bar = progress::bar(reader.file_len(), "checking");
    reader.verify_footer_with(|n| bar.inc(n))?;
    bar.finish_and_clear();
    Ok(())
}

/// [`footer`], when one of `names` has no digest (copies check the others
/// as they stream).
///
/// # Errors
/// As [`footer`].
pub fn footer_for(reader: &Reader, names: &[&str]) -> deathtensors_io::Result<()> {
    let header = reader.header();
    if names.iter().any(|n| header.get(n).is_some_and(|t| t.sha256.is_none())) {
        footer(reader)?;
    }
    Ok(())
}
