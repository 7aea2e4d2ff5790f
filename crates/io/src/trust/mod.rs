//! Trust, below the file: keys and ciphers (`crypt`), Rego policies
//! (`policy`), what a signed model commits a file to (`commitment`), what a
//! reader checks when it opens an encrypted or signed file (`access`), and
//! cryptotensors' files (`cryptotensors`). Built on `fs`; the file's reader
//! and writers use it.
//!
//! Bottom to top: `crypt`, `policy`, `commitment`, `cryptotensors`,
//! `access`.

pub(crate) mod access;
pub(crate) mod commitment;
pub(crate) mod crypt;
pub(crate) mod cryptotensors;
pub(crate) mod policy;
