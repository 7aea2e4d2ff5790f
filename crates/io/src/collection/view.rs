//! Zero-copy views of committed rows: a mapping of the block file.

use deathtensors_format::RowLayout;

use super::block::BlockFile;
use crate::error::{Error, Result};
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
