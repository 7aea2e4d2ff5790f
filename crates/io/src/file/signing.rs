//! Signing files (`docs/FORMAT.md` section 11): the footer and signature
//! block that end a file being written, and adding a signature to an
//! existing file through an atomic copy.

use std::io::Write;
use std::path::Path;

use deathtensors_format::{encode_signatures, signed_message, Flags, Prefix, SignatureRecord};

use crate::error::{Error, Result};
use crate::file::reader::Reader;
use crate::fs::atomic::TempFile;
use crate::fs::hash::{self, Hasher};
use crate::fs::pread::{read_exact_at, write_all_at};
use crate::options::WriteOptions;
use crate::trust::crypt::{sign_message, SigningKey};

const DOING: &str = "cannot write";

/// The signature block of `signers` over a file whose head (prefix and
/// header, `file[0 .. header_end]`) and footer are given.
pub(crate) fn signature_block(
    signers: &[std::sync::Arc<SigningKey>],
    head: &[u8],
    footer: Option<&[u8; 32]>,
) -> std::result::Result<Vec<u8>, deathtensors_format::Error> {
    let message = signed_message(head, footer);
    let mut records: Vec<SignatureRecord> = Vec::with_capacity(signers.len());
    for k in signers {
        let record = sign_message(k, &message);
        // The same key given twice signs once (a block never repeats a signer).
        if !records.iter().any(|r| r.public_key == record.public_key) {
            records.push(record);
        }
    }
    encode_signatures(&records)
}

/// Ends a file written in place in `temp` whose blob ends at `data_end`:
/// the footer, hashed back from the file (with `CHECKSUM`), then the
/// signatures (with `SIGNED`). `head` is the file's prefix and header.
pub(crate) fn finish(
    temp: &TempFile,
    path: &Path,
    head: &[u8],
    data_end: u64,
    flags: Flags,
    options: &WriteOptions,
) -> Result<()> {
    let io = |e| Error::io(e, path, DOING);
    let mut end = data_end;
    let footer = if flags.contains(Flags::CHECKSUM) {
        let mut h = Hasher::new();
        h.update(&head[Prefix::LEN..]);
        let mut buf = vec![0u8; hash::CHUNK];
        let mut at = head.len() as u64;
        while at < data_end {
            let n = (data_end - at).min(buf.len() as u64) as usize;
            read_exact_at(temp.file(), &mut buf[..n], at).map_err(io)?;
            h.update(&buf[..n]);
            at += n as u64;
        }
        let footer = h.finish();
        write_all_at(temp.file(), &footer, data_end).map_err(io)?;
        end += 32;
        Some(footer)
    } else {
        None
    };
    if flags.contains(Flags::SIGNED) {
        let block =
            signature_block(&options.signers, head, footer.as_ref()).map_err(|e| Error::format(e, path, DOING))?;
        write_all_at(temp.file(), &block, end).map_err(io)?;
    }
    Ok(())
}

/// Adds `key`'s signature to the file at `path`, keeping its other
/// signatures: the file is copied with the new block to a temp file that
/// replaces it, so a crash leaves the old file or the new one. The data is
/// copied, never re-encoded.
///
/// # Errors
/// - `Format` and the checks of [`Reader::open`] (existing signatures must
///   verify).
/// - `InvalidInput` for a safetensors file, a plaintext file whose tensors
///   lack `sha256` digests (save it with `checksum`), or a key that has
///   signed the file already.
/// - `TensorDigestMismatch` or `ChecksumMismatch` if the file's bytes no
///   longer match its digests or footer: damaged bytes are not signed.
/// - `Io`.
pub fn sign_file(path: impl AsRef<Path>, key: &SigningKey, durable: bool) -> Result<()> {
    sign_file_with(path.as_ref(), key, durable, |_| {}, |_| {})
}

/// [`sign_file`], telling `started` the bytes the check before signing
/// reads (once, at the start), and `progress` the bytes checked as it
/// goes (from any thread): what a progress bar needs.
///
/// # Errors
/// As [`sign_file`].
pub fn sign_file_with(
    path: &Path,
    key: &SigningKey,
    durable: bool,
    started: impl FnOnce(u64),
    progress: impl Fn(u64) + Sync,
) -> Result<()> {
    let io = |e| Error::io(e, path, DOING);
    let reader = Reader::open(path)?;
    let head = reader.head();
    if head.header.format() != deathtensors_format::Format::Deathtensors {
        return Err(Error::input("only deathtensors files can be signed: convert the file first", path, DOING));
    }
    // A sealed file's digests are in its sealed header: its checksum flag
    // says our writer recorded them.
    let digests =
        if head.sealed.is_some() { head.flags.contains(Flags::CHECKSUM) } else { head.header.has_tensor_digests() };
    if !digests {
        let how = if head.flags.contains(Flags::ENCRYPTED) {
            "encrypt it again with a checksum (`deathtensors encrypt IN OUT --key KEY --to KEY --checksum --sign KEY`, or \
             save(..., encrypt=..., sign=...)), which a key holder can do"
        } else {
            "re-save or convert it with a checksum first (`deathtensors convert IN OUT --checksum`, or \
             save(..., checksum=True))"
        };
        return Err(Error::input(
            format!(
                "a signature commits to the data through per-tensor sha256 digests (of the ciphertext, for an \
                 encrypted file), and this file has none: {how}"
            ),
            path,
            DOING,
        ));
    }
    let me = key.verifying_key();
    if reader.signers().contains(&me) {
        return Err(Error::input(format!("the file is already signed by {}", me.fingerprint()), path, DOING));
    }
    // A signature vouches for the bytes its digests describe: bytes damaged
    // since they were written are not signed (a sealed file's digests are
    // under its key; its footer is checked).
    if head.sealed.is_some() {
        if let Some((start, end)) = head.checksummed() {
            started(end - start);
            reader.verify_footer_with(&progress)?;
        }
    } else {
        started(reader.verify_progress_len());
        reader.verify_with(&progress)?;
    }
    let body_end = head.data_end + head.footer().map_or(0, |_| 32);
    let mut signed = vec![0u8; head.header_end as usize];
    read_exact_at(&std::fs::File::open(path).map_err(io)?, &mut signed, 0).map_err(io)?;
    let flags = head.flags | Flags::SIGNED;
    signed[12..16].copy_from_slice(&flags.bits().to_le_bytes());
    let footer = match head.footer() {
        Some((start, _)) => {
            let mut f = [0u8; 32];
            read_exact_at(&std::fs::File::open(path).map_err(io)?, &mut f, start).map_err(io)?;
            Some(f)
        }
        None => None,
    };
    let mut records = reader.signatures().to_vec();
    records.push(sign_message(key, &signed_message(&signed, footer.as_ref())));
    let block = encode_signatures(&records).map_err(|e| Error::format(e, path, DOING))?;
    drop(reader);

    let temp = TempFile::create(path, durable).map_err(io)?;
    let mut src = std::fs::File::open(path).map_err(io)?;
    let mut out = temp.file();
    out.write_all(&signed[..Prefix::LEN]).map_err(io)?;
    std::io::Seek::seek(&mut src, std::io::SeekFrom::Start(Prefix::LEN as u64)).map_err(io)?;
    // copy() uses copy_file_range on Linux: the kernel copies, not us.
    let copied =
        std::io::copy(&mut std::io::Read::take(&mut src, body_end - Prefix::LEN as u64), &mut out).map_err(io)?;
    if copied != body_end - Prefix::LEN as u64 {
        return Err(Error::input("the file changed while it was being signed", path, DOING));
    }
    out.write_all(&block).map_err(io)?;
    // Closed before the rename: Windows refuses to replace an open file.
    drop(src);
    temp.persist().map_err(io)
}
