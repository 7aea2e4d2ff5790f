//! One file or a sharded checkpoint, seen alike by the work that reads
//! tensors by name across either (`diff`): its tensors in order, its
//! global metadata, and the reader holding each tensor.

use deathtensors_format::Metadata;

use crate::error::Result;
use crate::file::reader::Reader;
use crate::tools::sharded::ShardedReader;

/// Named tensors held by one file or by the shards of a checkpoint.
pub trait TensorSet: Sync {
    /// Whether the names are all there is to see.
    ///
    /// # Errors
    /// `NoKey` for a sealed file opened without its key (it lists no
    /// tensors, but holds some).
    fn check_listed(&self) -> Result<()>;

    /// The tensor names, in the header's (or the index's) order.
    fn names(&self) -> Vec<&str>;

    /// The global metadata (a sharded checkpoint's: its index's, without
    /// the index's own `total_size`, which one file does not carry).
    fn global_metadata(&self) -> Metadata;

    /// The reader holding tensor `name` (opening its shard).
    ///
    /// # Errors
    /// `TensorNotFound`; `NoKey` for a sealed file opened without its key;
    /// the shard's open.
    fn reader_of(&self, name: &str) -> Result<&Reader>;
}

impl TensorSet for Reader {
    fn check_listed(&self) -> Result<()> {
        self.check_not_hidden()
    }

    fn names(&self) -> Vec<&str> {
        self.header().tensors().iter().map(|t| t.name.as_str()).collect()
    }

    fn global_metadata(&self) -> Metadata {
        self.header().metadata().cloned().unwrap_or_default()
    }

    fn reader_of(&self, name: &str) -> Result<&Reader> {
        self.tensor(name).map(|_| self)
    }
}

impl TensorSet for ShardedReader {
    /// The index lists every tensor; a sealed shard says `NoKey` when one
    /// of its tensors is asked for.
    fn check_listed(&self) -> Result<()> {
        Ok(())
    }

    fn names(&self) -> Vec<&str> {
        self.keys().collect()
    }

    fn global_metadata(&self) -> Metadata {
        let mut metadata = self.metadata().clone();
        metadata.remove("total_size");
        metadata
    }

    fn reader_of(&self, name: &str) -> Result<&Reader> {
        ShardedReader::reader_of(self, name)
    }
}
