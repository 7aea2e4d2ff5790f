//! What a file that is neither format looks like, from its first bytes,
//! so that errors can say it (a Git LFS pointer, an HTML page, ...).

/// Names what a file that is neither format looks like, from its first bytes.
pub(crate) fn sniff(bytes: &[u8]) -> Option<&'static str> {
    let trimmed = {
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
        &bytes[start..]
    };
    let lower_starts =
        |prefix: &[u8]| trimmed.len() >= prefix.len() && trimmed[..prefix.len()].eq_ignore_ascii_case(prefix);
    Some(match bytes {
        [] => "an empty file",
        _ if bytes.starts_with(b"version https://git-lfs") => {
            "a Git LFS pointer, not the file itself (fetch it with `git lfs pull`)"
        }
        _ if lower_starts(b"<!doctype html") || lower_starts(b"<html") || lower_starts(b"<head") => {
            "an HTML page (a download that returned a web page instead of the file)"
        }
        _ if lower_starts(b"<?xml") => "an XML document (perhaps an error page from a storage service)",
        [0x80, 2..=5, ..] => "a Python pickle (a PyTorch .bin or .pt file; unsafe to load from untrusted sources)",
        [b'P', b'K', 3, 4, ..] => "a zip archive (PyTorch .pt and .pth files are zip archives of pickles)",
        [0x1f, 0x8b, ..] => "a gzip file",
        [0x28, 0xb5, 0x2f, 0xfd, ..] => "a zstd frame",
        [b'G', b'G', b'U', b'F', ..] => "a GGUF file",
        [0x89, b'H', b'D', b'F', ..] => "an HDF5 file",
        [0x93, b'N', b'U', b'M', b'P', b'Y', ..] => "a numpy .npy file",
        [b'{', ..] | [b'[', ..] => "a JSON document (a sharded checkpoint's index, or a config file?)",
        // Read as a safetensors header length, 8 printable bytes are over
        // 6 * 10^17: no real file. A damaged magic or a text file, then.
        _ if bytes.get(..8).is_some_and(is_text) => "text (a text file, or a file whose magic number was damaged?)",
        _ => return None,
    })
}

/// Whether every byte is printable ASCII or the whitespace text files hold.
fn is_text(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| matches!(b, b'\t' | b'\n' | b'\r' | 0x20..=0x7e))
}
