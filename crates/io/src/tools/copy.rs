//! Streaming tensors from open files into a new one: conversions, metadata
//! edits, merges of shards and appends.

use std::path::Path;

use deathtensors_format::TensorSpec;

use crate::error::Result;
use crate::file::reader::Reader;
use crate::file::stream_check::StreamCheck;
use crate::file::writer::save_from;
use crate::options::WriteOptions;

/// Bytes per positioned read and write when streaming: large enough to run
/// at disk speed, small enough that memory stays bounded whatever the
/// tensors' sizes.
pub const COPY_CHUNK: usize = 8 << 20;

/// Writes a file of `specs` at `output`, atomically, streaming each tensor's
/// bytes from the tensor of the same name in the reader `source` gives for
/// it (one per shard, when merging a sharded checkpoint), in chunks,
/// compressed as `options` say. `progress` is told the bytes as they are
/// read, from any thread.
///
/// Nothing appears at `output` before the whole file is written (and a
/// previous file there stays whole): the writer works in a temp file that
/// replaces `output` at the end, so writing onto an input is safe too.
/// Every tensor that has a digest is checked as it streams past: one that
/// fails fails the copy, and nothing is written.
///
/// # Errors
/// As [`Writer::create`](crate::Writer::create), and the reads' errors (a tensor `source` does not
/// have is `TensorNotFound`, a tensor whose bytes do not match its digest
/// `TensorDigestMismatch`).
pub fn copy_tensors<'r>(
    source: impl Fn(&str) -> Result<&'r Reader> + Sync,
    output: &Path,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
    progress: impl Fn(u64) + Sync,
) -> Result<()> {
    // Compressing writers ask for chunks from all cores.
    let check = StreamCheck::default();
    save_from(output, specs, options, |name, offset, buf| {
        let reader = source(name)?;
        reader.read_range_into(name, offset, buf)?;
        check.take(reader, name, offset, buf)?;
        progress(buf.len() as u64);
        Ok(())
    })?;
    Ok(())
}
