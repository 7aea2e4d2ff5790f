//! Pickles read without running them (docs/PICKLE.md): torch checkpoints'
//! `data.pkl`. By idea, bottom to top:
//! - `value.rs`: the values a pickle builds, in an arena; storages and
//!   tensors;
//! - `allow.rs`: the allow list, each constructor a pure function of the
//!   tree;
//! - `machine.rs`: every opcode of protocols 0 to 5, run symbolically;
//! - `checkpoint.rs`: the tree as a checkpoint (names flattened with dots,
//!   tensors, metadata), and the scan of what a pickle refers to.

mod allow;
mod checkpoint;
mod machine;
mod value;

pub use allow::{lookup, MAX_PICKLE_RANK};
pub use checkpoint::{scan, Checkpoint, Scan, MAX_PICKLE_DEPTH};
pub use machine::{unpickle, NameRef, Unpickled, MAX_PICKLE_STACK};
pub use value::{Arena, Global, Id, StorageRef, TensorRef, Value};

#[cfg(test)]
mod tests;
