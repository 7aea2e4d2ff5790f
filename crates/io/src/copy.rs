//! Streaming tensors from open files into a new one: conversions, metadata
//! edits, merges of shards and appends.

use std::path::Path;

use deathtensors_format::TensorSpec;

use crate::error::Result;
use crate::reader::Reader;
use crate::writer::{WriteOptions, Writer};

/// Bytes per positioned read and write when streaming: large enough to run
/// at disk speed, small enough that memory stays bounded whatever the
/// tensors' sizes.
pub const COPY_CHUNK: usize = 8 << 20;

/// Writes a file of `specs` at `output`, atomically, streaming each tensor's
/// bytes from the tensor of the same name in the reader `source` gives for
/// it (one per shard, when merging a sharded checkpoint), in chunks of
/// [`COPY_CHUNK`]. `progress` is told the bytes as they are written.
///
/// Nothing appears at `output` before the whole file is written (and a
/// previous file there stays whole): the writer works in a temp file that
/// replaces `output` at the end, so writing onto an input is safe too.
///
/// # Errors
/// As [`Writer::create`], and the reads' errors (a tensor `source` does not
/// have is `TensorNotFound`).
pub fn copy_tensors<'r>(
    source: impl Fn(&str) -> Result<&'r Reader>,
    output: &Path,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
    mut progress: impl FnMut(u64),
) -> Result<()> {
    let mut writer = Writer::create(output, specs, options)?;
    // In the output's order, so that the writes are sequential.
    let names: Vec<String> = writer.header().tensors().iter().map(|t| t.name.clone()).collect();
    for name in &names {
        let reader = source(name)?;
        writer.write_tensor_with(name, COPY_CHUNK, |offset, buf| {
            reader.read_range_into(name, offset, buf)?;
            progress(buf.len() as u64);
            Ok(())
        })?;
    }
    writer.finish()
}
