//! A tensor's dimensions, as a decoded header holds them: up to two inline,
//! more on the heap. Nearly every tensor of a model has one or two
//! dimensions, so a 20,000-tensor header makes no allocation for its
//! shapes (a `Vec` would make 20,000), and a [`Shape`] takes no more room
//! than a `Vec`.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::ops::Deref;

/// Dimensions stored without an allocation.
const INLINE: usize = 2;

/// The dimensions of a tensor; empty for a scalar. Reads as a `[u64]`
/// (`&shape[..]`, `shape.len()`, `shape.iter()`), converts from and into
/// `Vec<u64>`, and compares with slices, arrays and vectors.
#[derive(Clone)]
pub struct Shape(Repr);

#[derive(Clone)]
enum Repr {
    /// `len` (0 to [`INLINE`]) dimensions, then zeros.
    Inline { len: u8, dims: [u64; INLINE] },
    /// More than [`INLINE`] dimensions.
    Heap(Box<[u64]>),
}

impl Shape {
    /// The shape of these dimensions.
    pub fn new(dims: &[u64]) -> Shape {
        match dims {
            [] => Shape(Repr::Inline { len: 0, dims: [0; INLINE] }),
            [a] => Shape(Repr::Inline { len: 1, dims: [*a, 0] }),
            [a, b] => Shape(Repr::Inline { len: 2, dims: [*a, *b] }),
            _ => Shape(Repr::Heap(dims.into())),
        }
    }

    /// The dimensions.
    pub fn as_slice(&self) -> &[u64] {
        match &self.0 {
            Repr::Inline { len, dims } => dims.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(dims) => dims,
        }
    }
}

impl Default for Shape {
    /// The shape of a scalar: no dimensions.
    fn default() -> Shape {
        Shape::new(&[])
    }
}

impl Deref for Shape {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        self.as_slice()
    }
}

impl AsRef<[u64]> for Shape {
    fn as_ref(&self) -> &[u64] {
        self.as_slice()
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_slice(), f)
    }
}

impl PartialEq for Shape {
    fn eq(&self, other: &Shape) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Shape {}

impl Hash for Shape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl PartialEq<[u64]> for Shape {
    fn eq(&self, other: &[u64]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<&[u64]> for Shape {
    fn eq(&self, other: &&[u64]) -> bool {
        self.as_slice() == *other
    }
}

impl<const N: usize> PartialEq<[u64; N]> for Shape {
    fn eq(&self, other: &[u64; N]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u64>> for Shape {
    fn eq(&self, other: &Vec<u64>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<Shape> for Vec<u64> {
    fn eq(&self, other: &Shape) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl PartialEq<Shape> for [u64] {
    fn eq(&self, other: &Shape) -> bool {
        self == other.as_slice()
    }
}

impl From<&[u64]> for Shape {
    fn from(dims: &[u64]) -> Shape {
        Shape::new(dims)
    }
}

impl<const N: usize> From<[u64; N]> for Shape {
    fn from(dims: [u64; N]) -> Shape {
        Shape::new(&dims)
    }
}

impl From<Vec<u64>> for Shape {
    fn from(dims: Vec<u64>) -> Shape {
        if dims.len() > INLINE {
            Shape(Repr::Heap(dims.into_boxed_slice()))
        } else {
            Shape::new(&dims)
        }
    }
}

impl From<Shape> for Vec<u64> {
    fn from(shape: Shape) -> Vec<u64> {
        match shape.0 {
            Repr::Heap(dims) => dims.into_vec(),
            Repr::Inline { .. } => shape.as_slice().to_vec(),
        }
    }
}

impl From<&Shape> for Vec<u64> {
    fn from(shape: &Shape) -> Vec<u64> {
        shape.as_slice().to_vec()
    }
}

impl FromIterator<u64> for Shape {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Shape {
        Shape::from(iter.into_iter().collect::<Vec<u64>>())
    }
}

impl<'a> IntoIterator for &'a Shape {
    type Item = &'a u64;
    type IntoIter = core::slice::Iter<'a, u64>;

    fn into_iter(self) -> Self::IntoIter {
        self.as_slice().iter()
    }
}

impl serde::Serialize for Shape {
    /// As a sequence of integers, like `Vec<u64>`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_reads_back_as_given() {
        let dims: Vec<u64> = (1..=6).map(|d| d * 1_000_000_007).collect();
        for rank in 0..=dims.len() {
            let given = &dims[..rank];
            for shape in [Shape::new(given), Shape::from(given.to_vec()), given.iter().copied().collect()] {
                assert_eq!(shape.as_slice(), given);
                assert_eq!(shape.len(), rank);
                assert_eq!(Vec::from(shape.clone()), given.to_vec());
                assert_eq!(shape, Shape::new(given));
                assert_eq!(alloc::format!("{shape:?}"), alloc::format!("{given:?}"));
            }
        }
    }

    #[test]
    fn shapes_compare_by_their_dimensions_only() {
        // An inline shape never equals a longer one whose extra dimensions
        // are the zeros its storage holds.
        assert_ne!(Shape::new(&[3]), Shape::new(&[3, 0]));
        assert_ne!(Shape::new(&[]), Shape::new(&[0]));
        assert_ne!(Shape::new(&[3, 0]), Shape::new(&[3, 0, 0]));
        assert_eq!(Shape::new(&[u64::MAX, 0]), [u64::MAX, 0]);
        assert_eq!(Shape::default(), Shape::new(&[]));
    }

    #[test]
    fn a_shape_takes_no_more_room_than_a_vec() {
        assert!(core::mem::size_of::<Shape>() <= core::mem::size_of::<Vec<u64>>());
    }
}
