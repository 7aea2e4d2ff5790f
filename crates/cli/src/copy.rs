//! Streaming tensors from an open file into a new one, with a progress bar:
//! conversions and metadata edits (`deathtensors_io::copy_tensors`).

use std::path::Path;

use deathtensors_io::format::TensorSpec;
use deathtensors_io::{copy_tensors, Reader, StagedFiles, WriteOptions};

use crate::{exit, progress};

/// Bytes per positioned read.
pub use deathtensors_io::COPY_CHUNK as CHUNK;

/// Writes a file of `specs` at `output`, atomically, streaming each tensor's
/// bytes from the tensor of the same name in `reader`, in chunks.
///
/// Nothing appears at `output` before the whole file is written (and a
/// previous file there stays whole), so writing onto the input is safe too.
/// The reader is closed when this returns: on Windows, which refuses to
/// rename over a file that is open, a file rewritten onto itself is written
/// beside it first, then the input is closed, then the new file renamed
/// over it (see docs/PLATFORMS.md).
pub fn copy(reader: Reader, output: &Path, specs: Vec<TensorSpec>, options: &WriteOptions) -> anyhow::Result<()> {
    #[cfg(windows)]
    if same_file(reader.path(), output) {
        let staged = staged_name(output);
        let written = copy_from(|_| Ok(&reader), &staged, specs, options);
        drop(reader);
        return written.and_then(|()| {
            std::fs::rename(&staged, output).map_err(|e| {
                let _ = std::fs::remove_file(&staged);
                anyhow::anyhow!(
                    "cannot replace {}: {e} (another program has it open: Windows refuses to replace an open file; \
                     it is unchanged)",
                    output.display()
                )
            })
        });
    }
    copy_from(|_| Ok(&reader), output, specs, options)
}

/// Whether two paths name the same existing file.
#[cfg(windows)]
fn same_file(a: &Path, b: &Path) -> bool {
    matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(a), Ok(b)) if a == b)
}

/// Where a file rewritten onto itself is written first, beside it: a name
/// that the next save to the folder removes if this process dies before
/// the rename (the temp files' `.NAME.PID.N.dt-tmp`).
#[cfg(windows)]
fn staged_name(output: &Path) -> std::path::PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(output.file_name().unwrap_or_default());
    name.push(format!(".{}.in-place.dt-tmp", std::process::id()));
    output.with_file_name(name)
}

/// [`copy`] as one of `staged`: written under a temp name, moved to
/// `output` by the set's commit (the files of a sharded checkpoint).
pub fn copy_staged(
    reader: &Reader,
    staged: &mut StagedFiles,
    output: &Path,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
) -> anyhow::Result<()> {
    with_bar(specs, output, |specs, inc| {
        staged.write(output, |at| copy_tensors(|_| Ok(reader), at, specs, options, inc))
    })
}

/// [`copy`], with each tensor read from the reader `source` gives for its
/// name (one per shard, when merging a sharded checkpoint).
pub fn copy_from<'r>(
    source: impl Fn(&str) -> deathtensors_io::Result<&'r Reader> + Sync,
    output: &Path,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
) -> anyhow::Result<()> {
    with_bar(specs, output, |specs, inc| copy_tensors(source, output, specs, options, inc))
}

/// Runs a copy of `specs` into `output` under one "writing" bar over their
/// bytes, its error said as a failed write of `output`.
fn with_bar(
    specs: Vec<TensorSpec>,
    output: &Path,
    copy: impl FnOnce(Vec<TensorSpec>, &(dyn Fn(u64) + Sync)) -> deathtensors_io::Result<()>,
) -> anyhow::Result<()> {
    let total = specs.iter().map(|s| s.byte_len().unwrap_or(0)).sum();
    let bar = progress::bar(total, "writing");
    copy(specs, &|n| bar.inc(n)).map_err(|e| exit::writing(e, output))?;
    bar.finish_and_clear();
    Ok(())
}
