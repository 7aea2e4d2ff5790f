//! The file: the lazy reader and the streaming writer of deathtensors v1
//! and safetensors files, with what they write and read besides the
//! tensors (compression, encryption, signatures). Built on `fs` and
//! `trust`.
//!
//! Bottom to top: `compress`; `reader` (open, read, verify, its report);
//! `protection` (what a header says of its protection), `stream_check`
//! (digests checked as bytes stream past); `signing`, `seal` (encrypted
//! writes), `pack` (compressed writes), `writer`.

pub(crate) mod compress;
pub(crate) mod pack;
pub(crate) mod protection;
pub(crate) mod reader;
pub(crate) mod seal;
pub(crate) mod signing;
pub(crate) mod stream_check;
pub(crate) mod writer;
