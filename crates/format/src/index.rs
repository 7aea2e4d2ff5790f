//! The index of a header's tensors by name: positions in the header's list
//! of tensors, in two hash tables split by one bit of each name's hash, so
//! that a large header's two halves are built at once on two threads (a
//! 10,000,000-tensor header spends most of its index's time waiting on
//! cache misses, which two cores wait on side by side). A name's hash says
//! which table holds it, so a lookup probes one table, and two equal names
//! always meet in the same table.

use core::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::tensor::{Format, TensorInfo};
use crate::{Error, ErrorKind, Fork, Result};

/// Headers with at least this many tensors build the two tables at once,
/// when the caller lends a thread (below, a thread costs more than it saves).
const FORK_MIN: usize = 2_500;

/// The index of a list of tensors by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    /// Split: positions of the names whose hash has its top bit clear,
    /// then set. Not split (a small list): every position in the first.
    halves: [HashTable<u32>; 2],
    split: bool,
    hasher: DefaultHashBuilder,
}

/// Which table of a split index a hash belongs to.
fn half(hash: u64) -> usize {
    (hash >> 63) as usize
}

impl Index {
    /// The index of `tensors`, its two tables built at once through `fork`
    /// for a large list; `beside` runs on the caller's thread meanwhile
    /// (after its table), or after both when they are built one by one.
    ///
    /// # Errors
    /// `DuplicateKey` for the first name (in list order) that repeats an
    /// earlier one.
    pub(crate) fn build(
        format: Format,
        tensors: &[TensorInfo],
        fork: &dyn Fork,
        beside: &mut (dyn FnMut() + Send),
    ) -> Result<Index> {
        let hasher = DefaultHashBuilder::default();
        let split = fork.is_parallel() && tensors.len() >= FORK_MIN;
        let built = if split {
            let (mut low, mut high) = (None, None);
            fork.join(
                &mut || {
                    low = Some(table(tensors, &hasher, Some(0)));
                    beside();
                },
                &mut || high = Some(table(tensors, &hasher, Some(1))),
            );
            let low = low.unwrap_or_else(|| table(tensors, &hasher, Some(0)));
            let high = high.unwrap_or_else(|| table(tensors, &hasher, Some(1)));
            match (low, high) {
                (Ok(low), Ok(high)) => Ok([low, high]),
                (Err(a), Err(b)) => Err(a.min(b)),
                (Err(a), _) | (_, Err(a)) => Err(a),
            }
        } else {
            let built = table(tensors, &hasher, None).map(|all| [all, HashTable::new()]);
            beside();
            built
        };
        match built {
            Ok(halves) => Ok(Index { halves, split, hasher }),
            Err(i) => {
                let within = match format {
                    Format::Deathtensors | Format::Bintensors => "tensors",
                    Format::Safetensors => "header",
                };
                let key = tensors.get(i).map(|t| t.name.as_str()).unwrap_or_default();
                Err(Error::new(ErrorKind::DuplicateKey { within, key: key.into() }))
            }
        }
    }

    /// The position in `tensors` (the list this index was built from) of
    /// the tensor named `name`, in O(1).
    pub(crate) fn find(&self, tensors: &[TensorInfo], name: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(name);
        let table = self.halves.get(if self.split { half(hash) } else { 0 })?;
        table.find(hash, |&j| tensors.get(j as usize).is_some_and(|t| t.name == name)).map(|&j| j as usize)
    }
}

/// The table of the names of `tensors` in half `which` (all of them for
/// `None`), or the position of the first of them that repeats an earlier
/// one.
fn table(
    tensors: &[TensorInfo],
    hasher: &DefaultHashBuilder,
    which: Option<usize>,
) -> core::result::Result<HashTable<u32>, usize> {
    // A half: room for a little more than half the names (the split is
    // even to within a fraction of a percent for any list that is split).
    let room = if which.is_some() { tensors.len() / 2 + tensors.len() / 32 } else { tensors.len() };
    let mut table = HashTable::with_capacity(room);
    let name_of = |j: u32| tensors.get(j as usize).map(|t| t.name.as_str()).unwrap_or_default();
    for (i, t) in tensors.iter().enumerate() {
        let hash = hasher.hash_one(t.name.as_str());
        if which.is_some_and(|w| half(hash) != w) {
            continue;
        }
        match table.entry(hash, |&j| name_of(j) == t.name.as_str(), |&j| hasher.hash_one(name_of(j))) {
            hashbrown::hash_table::Entry::Occupied(_) => return Err(i),
            // `tensors.len()` is bounded by `Limits::max_tensors`, at most u32::MAX.
            hashbrown::hash_table::Entry::Vacant(v) => _ = v.insert(i as u32),
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::{Dtype, Serial, Shape};

    fn tensors(names: &[&str]) -> Vec<TensorInfo> {
        names
            .iter()
            .map(|&n| TensorInfo {
                name: n.into(),
                dtype: Dtype::U8,
                shape: Shape::new(&[]),
                data_offsets: (0, 0),
                metadata: Default::default(),
                sha256: None,
            })
            .collect()
    }

    /// A fork that runs its jobs one after the other but says it is
    /// parallel: the split path, deterministically.
    struct Split;

    impl Fork for Split {
        fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
            b();
            a();
        }
    }

    #[test]
    fn every_name_is_found_at_its_position_split_or_not() {
        let names: Vec<alloc::string::String> = (0..5_000).map(|i| alloc::format!("layer.{i}.weight")).collect();
        let list = tensors(&names.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        for fork in [&Serial as &dyn Fork, &Split] {
            let mut ran = 0;
            let index = Index::build(Format::Deathtensors, &list, fork, &mut || ran += 1).unwrap();
            assert_eq!(ran, 1);
            for (i, n) in names.iter().enumerate() {
                assert_eq!(index.find(&list, n), Some(i));
            }
            assert_eq!(index.find(&list, "layer.5000.weight"), None);
            let sizes = index.halves.each_ref().map(|h| h.len());
            let expected = if index.split { sizes.iter().all(|&n| n > 2_000) } else { sizes == [5_000, 0] };
            assert!(expected, "{sizes:?}");
        }
    }

    #[test]
    fn the_first_repeat_in_list_order_is_reported_whichever_table_holds_it() {
        let mut names: Vec<alloc::string::String> = (0..4_000).map(|i| alloc::format!("t{i}")).collect();
        // Repeats at 4,000 and later of names in different tables (or not):
        // the first in list order is the one reported.
        for repeat in ["t17", "t5", "t3999", "t0", "t1234"] {
            names.push(repeat.into());
        }
        let list = tensors(&names.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        for fork in [&Serial as &dyn Fork, &Split] {
            let e = Index::build(Format::Safetensors, &list, fork, &mut || {}).unwrap_err();
            assert_eq!(e.kind(), &ErrorKind::DuplicateKey { within: "header", key: "t17".into() });
        }
    }
}
