//! Adding tensors to an existing file: a streaming copy into a new file that
//! replaces the old one atomically.

use std::path::Path;

use deathtensors_format::{Format, Metadata, TensorSpec};

use crate::copy::COPY_CHUNK;
use crate::error::{Error, Result};
use crate::reader::Reader;
use crate::writer::{WriteOptions, Writer};

const DOING: &str = "cannot append to";

/// Adds `tensors` after the tensors of the file at `path`, keeping its
/// format, alignment, checksums (a file with a footer or digests gets both,
/// for every tensor) and metadata; `extra_metadata` entries are added to
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
    let mut metadata = header.metadata().cloned();
    if let Some(extra) = extra_metadata {
        let m = metadata.get_or_insert_with(Metadata::new);
        m.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let deathtensors = header.format() == Format::Deathtensors;
    let options = WriteOptions {
        format: header.format(),
        alignment: header.alignment(),
        checksum: deathtensors && (reader.has_footer() || header.tensors().iter().any(|t| t.sha256.is_some())),
        durable,
        metadata,
        ..WriteOptions::default()
    };
    let old: Vec<TensorSpec> = header.tensors().iter().map(|t| TensorSpec { sha256: None, ..t.to_spec() }).collect();
    let specs = old.iter().cloned().chain(tensors.iter().map(|(s, _)| TensorSpec { sha256: None, ..s.clone() }));
    let mut writer = Writer::create(path, specs.collect(), &options)?;
    for spec in &old {
        let name = spec.name.as_str();
        writer.write_tensor_with(name, COPY_CHUNK, |offset, buf| reader.read_range_into(name, offset, buf))?;
    }
    for (spec, bytes) in &tensors {
        writer.write_tensor(&spec.name, bytes)?;
    }
    writer.finish()
}
