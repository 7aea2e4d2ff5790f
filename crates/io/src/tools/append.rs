//! Adding tensors to an existing file: a streaming copy into a new file that
//! replaces the old one atomically.

use std::path::Path;

use std::collections::HashMap;

use deathtensors_format::{Format, Metadata, TensorInfo, TensorSpec};

use crate::error::{Error, Result};
use crate::file::reader::Reader;
use crate::file::stream_check::StreamCheck;
use crate::file::writer::save_from;
use crate::options::Compress;
use crate::options::WriteOptions;

const DOING: &str = "cannot append to";

/// Adds `tensors` after the tensors of the file at `path`, keeping its
/// format, alignment, compression (per-tensor chunks, or 0.3.0's whole-blob
/// frame), checksums (a file with a footer or digests gets both, for every
/// tensor) and metadata; `extra_metadata` entries are added to
/// the global metadata, replacing values of the same keys (as deathtensors
/// 0.3.0 does).
///
/// The existing tensors stream from the old file into a new one in chunks:
/// memory stays bounded whatever the file's size. The new file replaces the
/// old atomically (`durable`: after an fsync), so a crash at any instant
/// leaves the old file or the new one, never a mix, and no temp file.
///
/// # Errors
/// - `InvalidInput` for a name the file already has or that is given twice,
///   and for encrypted, sealed or signed files (a new signature needs the
///   signer's key: decrypt or append, then sign again);
/// - as [`Reader::open`] and [`crate::save`].
pub fn append(
    path: impl AsRef<Path>,
    tensors: Vec<(TensorSpec, &[u8])>,
    extra_metadata: Option<&Metadata>,
    durable: bool,
) -> Result<()> {
    let path = path.as_ref();
    let reader = Reader::open(path)?;
    let refuse = |what: &str| {
        Err(Error::input(
            format!("the file is {what}; appending would need its keys and drop what they protect"),
            path,
            DOING,
        ))
    };
    if reader.is_encrypted() || reader.is_cryptotensors() {
        return refuse("encrypted");
    }
    if !reader.signatures().is_empty() {
        return refuse("signed");
    }
    let header = reader.header();
    for (i, (spec, _)) in tensors.iter().enumerate() {
        if header.get(&spec.name).is_some() || tensors[..i].iter().any(|(s, _)| s.name == spec.name) {
            let message = format!("tensor {:?} is already in the file or given twice", spec.name);
            return Err(Error::input(message, path, DOING));
        }
    }
    for (spec, bytes) in &tensors {
        let need = spec.byte_len().map_err(|e| Error::format(e, path, DOING))?;
        if bytes.len() as u64 != need {
            let message =
                format!("tensor {:?}: {} bytes given, its dtype and shape need {need}", spec.name, bytes.len());
            return Err(Error::input(message, path, DOING));
        }
    }
    let mut metadata = header.metadata().cloned();
    if let Some(extra) = extra_metadata {
        let m = metadata.get_or_insert_with(Metadata::new);
        m.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let deathtensors = header.format() == Format::Deathtensors;
    // The level is the file's, or zstd's default where the file does not say.
    let level = header.compression().map_or(Compress::DEFAULT_LEVEL, |c| c.level as i32);
    let compress = match (reader.head().is_compressed(), reader.head().is_chunk_compressed()) {
        (true, _) => Compress::Blob { level },
        (_, true) => Compress::Chunked { level },
        _ => Compress::Off,
    };
    let options = WriteOptions {
        format: header.format(),
        alignment: header.alignment(),
        checksum: deathtensors && (reader.has_footer() || header.tensors().iter().any(|t| t.sha256.is_some())),
        durable,
        metadata,
        compress,
        ..WriteOptions::default()
    };
    let new: HashMap<&str, &[u8]> = tensors.iter().map(|(s, b)| (s.name.as_str(), *b)).collect();
    let specs = header.tensors().iter().map(TensorInfo::to_spec).chain(tensors.iter().map(|(s, _)| s.clone()));
    let specs = specs.map(|s| TensorSpec { sha256: None, ..s }).collect();
    // The file's own tensors are checked against their digests as they are
    // copied: a damaged one fails the append, and nothing is written.
    let check = StreamCheck::default();
    let fill = |name: &str, offset: u64, buf: &mut [u8]| match new.get(name) {
        Some(bytes) => {
            // Lengths were checked above.
            let at = usize::try_from(offset).ok().and_then(|o| bytes.get(o..o + buf.len()));
            let part = at.ok_or_else(|| Error::input(format!("tensor {name:?}: too few bytes"), path, DOING))?;
            buf.copy_from_slice(part);
            Ok(())
        }
        None => {
            reader.read_range_into(name, offset, buf)?;
            check.take(&reader, name, offset, buf)
        }
    };
    if cfg!(windows) {
        // Windows refuses to replace a file that is open, and `reader` is:
        // the new file is staged beside the old one, the reader closed,
        // then the new file moved over the old (docs/PLATFORMS.md).
        let mut staged = crate::StagedFiles::new(durable);
        staged.write(path, |at| save_from(at, specs, &options, fill))?;
        drop(reader);
        return staged.commit();
    }
    save_from(path, specs, &options, fill)?;
    Ok(())
}
