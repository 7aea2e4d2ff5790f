//! What is built on files: streaming copies (`copy`, `append`), sharded
//! checkpoints (`sharded`, seen alike with one file by `tensor_set`),
//! appendable collections (`collection`), distributed checkpoints (`dcp`),
//! signed model directories (`model_sign`), and what people look at
//! (`values`, `stats`, `diff`, `sidecar`). Each uses the file's reader and
//! writer; none writes bytes of its own format but through `fs`.
//!
//! Bottom to top: `values`, `copy`, `append`, `stats`, `sidecar`,
//! `sharded`, `tensor_set`, `diff`, `collection`, `dcp`, `model_sign`.

pub(crate) mod append;
pub(crate) mod collection;
pub(crate) mod copy;
pub(crate) mod dcp;
pub(crate) mod diff;
pub(crate) mod model_sign;
pub(crate) mod sharded;
pub(crate) mod sidecar;
pub(crate) mod stats;
pub(crate) mod tensor_set;
pub mod values;
