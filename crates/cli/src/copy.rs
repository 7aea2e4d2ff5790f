//! Streaming tensors from an open file into a new one: conversions and
//! metadata edits.

use std::path::Path;

use deathtensors_io::format::TensorSpec;
use deathtensors_io::{Reader, WriteOptions, Writer};

use crate::{exit, progress};

/// Bytes per positioned read and write: large enough to run at disk speed,
/// small enough that memory stays bounded whatever the tensors' sizes.
pub const CHUNK: usize = 8 << 20;

/// Writes a file of `specs` at `output`, atomically, streaming each tensor's
/// bytes from the tensor of the same name in `reader`, in chunks.
///
/// Nothing appears at `output` before the whole file is written (and a
/// previous file there stays whole): the writer works in a temp file that
/// replaces `output` at the end, so writing onto the input is safe too.
pub fn copy(reader: &Reader, output: &Path, specs: Vec<TensorSpec>, options: &WriteOptions) -> anyhow::Result<()> {
    copy_from(|_| Ok(reader), output, specs, options)
}

/// [`copy`], with each tensor read from the reader `source` gives for its
/// name (one per shard, when merging a sharded checkpoint).
pub fn copy_from<'r>(
    source: impl Fn(&str) -> anyhow::Result<&'r Reader>,
    output: &Path,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
) -> anyhow::Result<()> {
    if options.compress != deathtensors_io::Compress::Off {
        // Compressing writers stream from a fill function, chunks on all cores.
        let total = specs.iter().map(|s| s.byte_len().unwrap_or(0)).sum();
        let bar = progress::bar(total, "writing");
        let readers = specs
            .iter()
            .map(|s| Ok((s.name.clone(), source(&s.name)?)))
            .collect::<anyhow::Result<std::collections::HashMap<String, &Reader>>>()?;
        let fill = |name: &str, offset: u64, buf: &mut [u8]| -> deathtensors_io::Result<()> {
            // Every name of `specs` has a reader.
            if let Some(reader) = readers.get(name) {
                reader.read_range_into(name, offset, buf)?;
            }
            bar.inc(buf.len() as u64);
            Ok(())
        };
        deathtensors_io::save_from(output, specs, options, fill).map_err(|e| exit::writing(e, output))?;
        bar.finish_and_clear();
        return Ok(());
    }
    let mut writer = Writer::create(output, specs, options).map_err(|e| exit::writing(e, output))?;
    // In the output's order, so that the writes are sequential.
    let names: Vec<String> = writer.header().tensors().iter().map(|t| t.name.clone()).collect();
    let bar = progress::bar(writer.header().data_len(), "writing");
    for name in &names {
        let reader = source(name)?;
        writer
            .write_tensor_with(name, CHUNK, |offset, buf| {
                reader.read_range_into(name, offset, buf)?;
                bar.inc(buf.len() as u64);
                Ok(())
            })
            .map_err(|e| exit::writing(e, output))?;
    }
    writer.finish().map_err(|e| exit::writing(e, output))?;
    bar.finish_and_clear();
    Ok(())
}
