//! A strict JSON value, for the header sections that nest deeper than the
//! tensor table (the `encryption` section). The full decoder builds it with
//! the same rules as the rest of the header: duplicate keys are errors,
//! integers are non-negative and fit in a `u64`, and nesting is bounded.

use alloc::string::String;
use alloc::vec::Vec;

/// How deep a section may nest (objects and arrays): the deepest section
/// defined (`encryption.recipients[i]`) needs 3.
pub(crate) const MAX_DEPTH: usize = 8;

/// One JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tree {
    Null,
    Bool(bool),
    /// A non-negative integer that fits in a `u64`.
    Uint(u64),
    /// Any other number (negative, fractional, too large): never valid in a
    /// section, kept so that the error can say which field it was.
    OtherNumber,
    Str(String),
    Array(Vec<Tree>),
    /// Keys in document order, each once.
    Object(Vec<(String, Tree)>),
}
