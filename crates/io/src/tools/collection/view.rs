//! Zero-copy views of committed rows: a mapping of the block file.

use deathtensors_format::RowLayout;

use super::block::BlockFile;
use crate::error::{Error, Result};
use crate::fs::mmap::Segment;
use crate::PrivateMap;

/// Committed rows of one block, mapped: the page cache's own pages, no copy.
#[derive(Debug)]
pub struct RowsView {
    map: PrivateMap,
    rows: u64,
}

impl RowsView {
    /// Maps rows `first..first + rows` of `block`.
    ///
    /// # Safety
    /// As [`PrivateMap`]: the block file must not be truncated or changed in
    /// place by another program while the view lives. Our writers never do
    /// either to rows a commit counts.
    pub(crate) unsafe fn map(block: &BlockFile, layout: &RowLayout, first: u64, rows: u64) -> Result<RowsView> {
        let len = block.file.metadata().map_err(|e| Error::io(e, &block.path, "cannot map"))?.len();
        let start = block.data_start + first * layout.row_bytes();
        // SAFETY: forwarded to the caller (see `# Safety`).
        let map = unsafe { PrivateMap::map(&block.file, len, start, rows * layout.row_bytes()) }
            .map_err(|e| Error::io(e, &block.path, "cannot map"))?;
        Ok(RowsView { map, rows })
    }

    /// The rows' bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// How many rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }
}

impl RowsView {
    /// The mapping itself, for callers that hand it on (the Python arena).
    pub fn into_map(self) -> PrivateMap {
        self.map
    }
}

impl super::Collection {
    /// Rows `start..start + count` as one copy-on-write mapping of their
    /// block files, side by side: memory the caller owns (writes stay in the
    /// mapping) that costs no copy and no fresh pages. `None` when the rows
    /// cannot be mapped so: some are not committed (their bytes may still
    /// change in place), a block's bytes are not a whole number of pages, or
    /// off unix. Callers then read them ([`super::Collection::read_rows`]).
    ///
    /// # Safety
    /// As [`super::Collection::view`]: block files must not be truncated or
    /// changed in place by another program while the mapping lives.
    ///
    /// # Errors
    /// `InvalidInput` for rows past the end; `Io` naming a block file.
    pub unsafe fn map_rows(&self, start: u64, count: u64) -> Result<Option<PrivateMap>> {
        let doing = "cannot map";
        if start.checked_add(count).is_none_or(|end| end > self.rows()) {
            return Err(
                self.input(format!("{count} rows from row {start} run past the end ({} rows)", self.rows()), doing)
            );
        }
        let (cap, rb) = (self.layout.block_rows, self.layout.row_bytes());
        let mut blocks = Vec::new();
        let mut done = 0;
        while done < count {
            let r = start + done;
            let (b, o) = ((r / cap) as usize, r % cap);
            let take = (cap - o).min(count - done);
            if o + take > self.slots[b].frozen {
                return Ok(None);
            }
            blocks.push((self.block(b)?, o, take));
            done += take;
        }
        let segments: Vec<Segment<'_>> = blocks
            .iter()
            .map(|(h, o, take)| Segment { file: &h.file, offset: h.data_start + o * rb, len: take * rb })
            .collect();
        // SAFETY: forwarded to the caller (see `# Safety`); the rows are
        // committed, which our writers never change in place.
        unsafe { PrivateMap::join(&segments) }.map_err(|e| Error::io(e, &self.dir, doing))
    }
}
