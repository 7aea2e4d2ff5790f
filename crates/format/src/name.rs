//! A tensor's name, as a decoded header holds it: a range of a buffer that
//! the names of many tensors share. A 20,000-tensor header then makes a few
//! allocations for its names instead of 20,000 (in a fresh process, those
//! and the pages they are first written to were a sixth of an open: see
//! CHANGELOG.md, 0.5.0), and a [`Name`] takes less room than a `String`.
//!
//! The fast decoder fills a buffer ([`Arena`]) with names, gives each entry
//! a name that is not yet [`Name::sealed`], and seals them all when the
//! buffer is full or the object ends; a name that is not sealed reads as
//! empty, which no header may hold, so a name left unsealed by mistake
//! could not pass as a tensor's.

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::borrow::Borrow;
use core::cmp::Ordering;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::mem::MaybeUninit;
use core::ops::Deref;

/// `end` of a name that is its whole buffer (any length).
const WHOLE: u32 = u32::MAX;

/// A tensor's name. Reads as a `str` (`&name[..]`, `name.len()`,
/// `name.starts_with(..)`), and compares, orders, hashes and prints as
/// one; converts from `String` and `&str` and into `String`.
#[derive(Clone)]
pub struct Name {
    /// The buffer; `None` while the decoder is still filling it.
    buf: Option<Arc<String>>,
    /// `buf[start..end]`, or all of `buf` when `end` is [`WHOLE`].
    start: u32,
    end: u32,
}

impl Name {
    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.buf {
            None => "",
            Some(buf) if self.end == WHOLE => buf,
            Some(buf) => buf.get(self.start as usize..self.end as usize).unwrap_or(""),
        }
    }

    /// Whether the name reads as what was given for it (always, but while
    /// the decoder fills its buffer).
    pub(crate) fn sealed(&self) -> bool {
        self.buf.is_some()
    }
}

impl Default for Name {
    /// The empty name (which no header holds).
    fn default() -> Name {
        Name::from(String::new())
    }
}

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Name {}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Name {
    /// As the `str` (so maps keyed by names can be searched with one).
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == other.as_str()
    }
}

impl From<String> for Name {
    fn from(name: String) -> Name {
        Name { buf: Some(Arc::new(name)), start: 0, end: WHOLE }
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Name {
        Name::from(String::from(name))
    }
}

impl From<&String> for Name {
    fn from(name: &String) -> Name {
        Name::from(name.as_str())
    }
}

impl From<Name> for String {
    fn from(name: Name) -> String {
        match name.buf {
            // The only holder of a whole buffer: no copy.
            Some(buf) if name.end == WHOLE => Arc::try_unwrap(buf).unwrap_or_else(|buf| String::from(buf.as_str())),
            _ => String::from(name.as_str()),
        }
    }
}

impl From<&Name> for String {
    fn from(name: &Name) -> String {
        String::from(name.as_str())
    }
}

impl serde::Serialize for Name {
    /// As a string.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A buffer the decoder writes names into, a block at a time: each block
/// is shared by the names written into it once it is sealed.
pub(crate) struct Arena {
    /// The block being filled.
    block: String,
    /// The size of a new block: at most [`BLOCK`], and no more than the
    /// input the names come from.
    block_len: usize,
}

/// The size of a full block (names are tens of bytes: ~1,000 of them a
/// block). Small enough to be carved from memory the allocator already
/// holds (glibc maps allocations of 128 KiB and more afresh), and for the
/// entries a seal walks to be still in cache. With 256 KiB blocks, a
/// Python open after `import numpy` took ~190 page faults more than with
/// one allocation a name (744 against 550), with 32 KiB ones 20 more.
pub(crate) const BLOCK: usize = 32 << 10;

impl Arena {
    /// An arena for names read from `input_len` bytes (they cannot hold
    /// more), with no block yet.
    pub(crate) fn new(input_len: usize) -> Arena {
        Arena { block: String::new(), block_len: input_len.clamp(1, BLOCK) }
    }

    /// Whether `name` fits in the block being filled.
    pub(crate) fn fits(&self, name: &str) -> bool {
        self.block.capacity() - self.block.len() >= name.len()
    }

    /// Starts a block with room for `name` at least (the previous one
    /// must have been sealed), after handing its room to `prefault`, to be
    /// mapped ahead.
    pub(crate) fn start_block(&mut self, name: &str, prefault: impl FnOnce(&mut [MaybeUninit<u8>])) {
        let mut room = Vec::with_capacity(self.block_len.max(name.len()));
        prefault(room.spare_capacity_mut());
        // Empty, so valid UTF-8 at no cost; the capacity is kept.
        self.block = String::from_utf8(room).unwrap_or_default();
    }

    /// `name`, written into the block (which must have room: see
    /// [`Arena::fits`]), as a name that reads as empty until sealed;
    /// `None` past a block of 4 GiB.
    pub(crate) fn push(&mut self, name: &str) -> Option<Name> {
        let start = u32::try_from(self.block.len()).ok()?;
        self.block.push_str(name);
        let end = u32::try_from(self.block.len()).ok().filter(|&end| end != WHOLE)?;
        Some(Name { buf: None, start, end })
    }

    /// Ends the block and makes `names`, the names written into it, read
    /// as written.
    pub(crate) fn seal<'n>(&mut self, names: impl Iterator<Item = &'n mut Name>) {
        let mut block = core::mem::take(&mut self.block);
        // Only the last block of an object can be less than half full.
        if block.len() < block.capacity() / 2 {
            block.shrink_to_fit();
        }
        let buf = Arc::new(block);
        for name in names {
            name.buf = Some(Arc::clone(&buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use super::*;

    #[test]
    fn a_name_is_smaller_than_a_string() {
        assert!(core::mem::size_of::<Name>() < core::mem::size_of::<String>());
    }

    #[test]
    fn names_of_one_block_read_as_written_once_sealed() {
        let given = ["a", "model.layers.0.weight", "é", "x"];
        let mut arena = Arena::new(1 << 20);
        let mut names = Vec::new();
        for g in given {
            if !arena.fits(g) {
                arena.start_block(g, |room| assert!(room.len() >= g.len()));
            }
            names.push(arena.push(g).unwrap());
        }
        assert!(names.iter().all(|n| !n.sealed() && n.as_str().is_empty()));
        arena.seal(names.iter_mut());
        for (n, g) in names.iter().zip(given) {
            assert!(n.sealed());
            assert_eq!(n, g);
            assert_eq!(n.to_string(), g);
            assert_eq!(String::from(n.clone()), g);
        }
    }

    #[test]
    fn a_name_compares_orders_and_hashes_as_its_str() {
        use core::hash::BuildHasher;
        let hasher = hashbrown::DefaultHashBuilder::default();
        let (a, b) = (Name::from("alpha"), Name::from("beta".to_string()));
        assert!(a < b);
        assert_eq!(a, "alpha");
        assert_eq!("alpha", a);
        assert_eq!(a, Name::from("alpha"));
        assert_eq!(hasher.hash_one(&a), hasher.hash_one("alpha"));
        assert_eq!(alloc::format!("{a:?} {b}"), "\"alpha\" beta");
        assert_eq!(Name::default(), "");
    }
}
