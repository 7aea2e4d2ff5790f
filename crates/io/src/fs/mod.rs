//! The machine and the file system: mapping and positioned reads, SHA-256
//! on all cores, threads, memory faulted in bulk, and writes that are
//! atomic (a file, or several together), durable and kind to the page
//! cache. Nothing here knows a file format.
//!
//! Bottom to top, each using only those before it: `mmap`, `mount` (the
//! kind of file system a file is on), `pread`,
//! `prefault`, `huge_pages`, `process` (whether a process of this host runs); `hash` (one stream, and the thread count),
//! `strided` (bytes as writers take them), `sha_lanes` (many streams),
//! `par` (jobs on all cores), `fork` (the header decoder's second thread);
//! `writeback`, `direct`, `atomic`, `staged`. The writers name the crate's
//! seam type `WriteOptions` (`durable`, `drop_cache`).

pub(crate) mod atomic;
pub(crate) mod direct;
pub(crate) mod fork;
pub(crate) mod hash;
pub(crate) mod huge_pages;
pub(crate) mod mmap;
pub(crate) mod mount;
pub(crate) mod par;
pub(crate) mod pread;
pub(crate) mod prefault;
pub(crate) mod process;
pub(crate) mod sha_lanes;
pub(crate) mod staged;
pub(crate) mod strided;
pub(crate) mod writeback;
