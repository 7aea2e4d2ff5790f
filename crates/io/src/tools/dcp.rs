//! Distributed checkpoints (`deathtensors.distributed`'s
//! `StorageWriter`, `docs/DISTRIBUTED.md`), by idea:
//! - `document.rs`: the metadata document (`deathtensors.json`): its
//!   limits, its parse with every check, chunks and tiles, rank-file and
//!   block names, the cover check. The one copy of these rules: Python's
//!   `deathtensors.distributed` runs the same check on what it loads.
//! - `consolidate.rs`: the full tensors put together from the rank files
//!   and written as one file or a Hugging Face checkpoint (the command
//!   line's `consolidate` and Python's `deathtensors.distributed.consolidate`).
//! - `source.rs`: where the files are read from (a directory, or through
//!   `deathtensors-remote` an object store's prefix).
//! - `protocol.rs`: the save protocol: a save's marker, whether a marker's
//!   save may still run, and which files a save removes before its ranks
//!   write and after its commit (Python's `StorageWriter` only lists,
//!   reads and removes what it is told).

mod consolidate;
mod document;
mod protocol;
mod source;

pub use consolidate::{check_rank_file, consolidate, consolidate_from, ConsolidateOptions, DEFAULT_MAX_SHARD_BYTES};
pub use deathtensors_format::{
    block_name, parse_rank_file_name, parse_rank_metadata_name, parse_save_marker_name, rank_file_name,
    rank_metadata_name, save_marker_name, DCP_METADATA,
};
pub use document::{
    check_checkpoint_metadata, check_chunk_cover, check_rank_checkpoint_metadata, chunk_tiles, Tile, DCP_VERSION,
    MAX_METADATA_BYTES, MAX_RANK, MAX_TILES,
};
pub use protocol::{
    after_commit_files, metadata_documents, uncommitted_files, SaveCaller, SaveListing, SaveMarker, DEFAULT_STALE_AFTER,
};
pub use source::{CheckpointDir, CheckpointSource};
