//! Moving rows between a collection and ordinary files: export rows as one
//! tensor of a deathtensors or safetensors file, and append the rows of a
//! file's tensor. Both stream through a bounded buffer, so the CLI and
//! Python share one implementation that never holds a collection in memory.

use std::ops::Range;
use std::path::Path;

use deathtensors_format::{Header, TensorSpec};

use super::{Collection, CollectionOptions};
use crate::error::{Error, Result};
use crate::file::stream_check::StreamCheck;
use crate::{Reader, WriteOptions, Writer};

/// Bytes moved per step.
const STEP: u64 = 8 << 20;

impl Collection {
    /// Writes rows `range` as one tensor `name` of shape `[rows, *row shape]`
    /// to a new file at `path` (format, checksum and the rest from
    /// `options`), streaming and atomically.
    ///
    /// # Errors
    /// `InvalidInput` for a range past the end; `BlockDigestMismatch` if a
    /// block the rows come from does not match its digest (nothing is
    /// written); as [`Writer`] otherwise.
    pub fn export(
        &self,
        range: Range<u64>,
        name: &str,
        path: impl AsRef<Path>,
        options: &WriteOptions,
    ) -> Result<Header> {
        let path = path.as_ref();
        if range.start > range.end || range.end > self.rows() {
            return Err(self.input(
                format!("rows {}..{} are not within the {} rows", range.start, range.end, self.rows()),
                "cannot export",
            ));
        }
        // The blocks the rows come from, against their digests: a damaged
        // block is not passed on into a file with fresh digests.
        self.verify_rows(range.clone())?;
        let mut shape = vec![range.end - range.start];
        shape.extend_from_slice(&self.layout.shape);
        let mut writer = Writer::create(path, vec![TensorSpec::new(name, self.layout.dtype, shape)], options)?;
        let rb = self.layout.row_bytes();
        let chunk = (STEP / rb).max(1) * rb;
        writer.write_tensor_with(name, chunk as usize, |done, buf| self.read_rows(range.start + done / rb, buf))?;
        let header = writer.header().clone();
        writer.finish()?;
        Ok(header)
    }

    /// Appends the rows of tensor `name` of `reader`: a tensor of the
    /// collection's dtype whose shape is `[n, *row shape]` (n rows) or the
    /// row shape itself (one row). Returns the rows appended.
    ///
    /// # Errors
    /// `InvalidInput` if the dtype or shape do not fit;
    /// `TensorDigestMismatch` if the tensor does not match its digest (no
    /// row of it is kept); as the reader's reads otherwise.
    pub fn append_tensor(&mut self, reader: &Reader, name: &str) -> Result<u64> {
        let doing = "cannot append to";
        let t = reader.tensor(name)?;
        let info = t.info;
        let shape = &self.layout.shape;
        let rows = if info.shape == *shape {
            1
        } else if info.shape.len() == shape.len() + 1 && info.shape[1..] == shape[..] {
            info.shape[0]
        } else {
            return Err(self.input(
                format!(
                    "tensor {name:?} of {} has shape {:?}; rows of this collection are {:?} (a batch is [n, ...row])",
                    reader.path().display(),
                    info.shape,
                    shape
                ),
                doing,
            ));
        };
        if info.dtype != self.layout.dtype {
            return Err(self.input(
                format!("tensor {name:?} holds {} values, the collection {}", info.dtype, self.layout.dtype),
                doing,
            ));
        }
        let rb = self.layout.row_bytes();
        let step = (STEP / rb).max(1);
        let mut buf = vec![0u8; (step.min(rows) * rb) as usize];
        // The tensor is checked against its digest as it streams in; if it
        // fails (or anything else does), the rows appended so far go again.
        let before = self.rows();
        let check = StreamCheck::default();
        let mut at = 0;
        let appended = (|| {
            while at < rows {
                let n = step.min(rows - at);
                let part = &mut buf[..(n * rb) as usize];
                reader.read_range_into(name, at * rb, part)?;
                check.take(reader, name, at * rb, part)?;
                let end = self.rows();
                self.write_rows(end, part)?;
                at += n;
            }
            Ok(rows)
        })();
        if appended.is_err() && self.rows() > before {
            let _ = self.truncate(before);
        }
        appended
    }
}

/// Copies the collection `src` (ours or a tensorblob directory) into a new
/// collection at `output`, rows in order, in one commit, with `block_rows`
/// rows per block (default: the source's). `output` must not exist or be an
/// empty directory; if the copy fails, nothing is left there.
///
/// # Errors
/// `InvalidInput` if `output` exists and is not empty;
/// `BlockDigestMismatch` if a block of `src` does not match its digest
/// (nothing is written); as the reads and writes otherwise.
pub fn convert_collection(src: &Collection, output: &Path, block_rows: Option<u64>) -> Result<u64> {
    let doing = "cannot convert into";
    let existed = output.exists();
    if existed && std::fs::read_dir(output).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(Error::input("exists and is not empty: a conversion writes a new collection", output, doing));
    }
    // Every block against its digest first: the copy gets fresh ones.
    src.verify()?;
    let mut layout = src.layout().clone();
    if let Some(b) = block_rows {
        layout = deathtensors_format::RowLayout::new(layout.dtype, layout.shape, b)
            .map_err(|e| Error::format(e, output, doing))?;
    }
    // Nothing half-made stays behind: the directory was empty (or not
    // there), so every file in it is this conversion's.
    let clean = || {
        if let Ok(entries) = std::fs::read_dir(output) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        if !existed {
            let _ = std::fs::remove_dir(output);
        }
    };
    let mut dst = match Collection::create(output, layout, CollectionOptions::default()) {
        Ok(dst) => dst,
        Err(e) => {
            clean();
            return Err(e);
        }
    };
    let copy = |dst: &mut Collection| -> Result<u64> {
        dst.extend_rows(src)?;
        dst.set_metadata(src.metadata().clone())?;
        dst.flush()?;
        Ok(dst.rows())
    };
    let result = copy(&mut dst);
    if result.is_err() {
        // Removed by the writer, while it holds the lock (the collections'
        // rule: only the writer removes files), its lock file last.
        clean();
    }
    drop(dst);
    if result.is_err() {
        // Where an open file cannot be removed (Windows), the lock file
        // goes once its handle is closed.
        clean();
    }
    result
}
