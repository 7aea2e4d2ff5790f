//! The index of a header's tensors by name: positions in the header's list
//! of tensors, in hash tables split by bits of each name's hash.
//!
//! One table of 10,000,000 names is built one cache miss after another
//! (most of the time of a 10 M-tensor open went there). A large list is
//! instead grouped by table first (its names hashed in two halves at once,
//! in list order, each half's positions and hashes written table by
//! table), then each table is built from its group: a table of about
//! [`TABLE_NAMES`] names stays in a core's cache while it is filled, and
//! the tables are shared between two threads. A list that fits in cache
//! has one table (built beside the caller's other work when a thread is
//! lent), or two up to twice that (one a thread). A name's
//! hash says which table holds it, so a lookup probes one table, and two
//! equal names always meet in the same one.

use alloc::vec;
use alloc::vec::Vec;
use core::hash::BuildHasher;
use core::ops::Range;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::tensor::{Format, TensorInfo};
use crate::{Error, ErrorKind, Fork, Result};

/// Lists of at least this many tensors are grouped and built on two
/// threads when the caller lends one (below, a thread costs more than it
/// saves).
const FORK_MIN: usize = 2_500;

/// About how many names a table of a large list holds: its control bytes
/// and slots (~160 KiB) stay in a core's L2 cache while it is filled.
const TABLE_NAMES: usize = 1 << 15;

/// At most 2^12 tables: a list of `u32::MAX` tensors still has about a
/// million names a table.
const MAX_BITS: u32 = 12;

/// The index of a list of tensors by name.
#[derive(Clone, Debug, Default)]
pub(crate) struct Index {
    /// The tables, `1 << bits` of them (one for `bits == 0`; none for an
    /// index of nothing). Table `t` holds the names whose hashes have
    /// `t` in the `bits` bits that [`table_of`] reads.
    tables: Vec<HashTable<u32>>,
    bits: u32,
    hasher: DefaultHashBuilder,
}

/// The table a hash belongs to, of `1 << bits`: bits from its middle.
/// Not its top bits, which a table uses as tags (a table whose names all
/// had the same tag would compare names on every probe), nor its low bits,
/// which place a name in a table.
fn table_of(hash: u64, bits: u32) -> usize {
    ((hash >> 32) & ((1 << bits) - 1)) as usize
}

/// How many bits of the hash pick the table for a list of `n` names: none
/// (one table) for a list that fits in cache.
fn table_bits(n: usize) -> u32 {
    n.div_ceil(TABLE_NAMES).next_power_of_two().trailing_zeros().min(MAX_BITS)
}

impl Index {
    /// The index of `tensors`; `beside` runs on the caller's thread once
    /// its share of the tables is built (while the other thread builds the
    /// rest, if one is lent).
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
        let parallel = fork.is_parallel() && tensors.len() >= FORK_MIN;
        let bits = table_bits(tensors.len());
        let built = if bits == 0 {
            // A list that fits in cache: one table, `beside` on the other
            // thread if one is lent.
            let mut built = None;
            run(fork, parallel, &mut || built = Some(one_table(tensors, &hasher, None)), beside);
            built.unwrap_or_else(|| one_table(tensors, &hasher, None)).map(|t| vec![t])
        } else if bits == 1 {
            // Two tables, each of about what fits in cache: each thread
            // reads every name and keeps its table's (no grouping).
            let (mut low, mut high) = (None, None);
            run(
                fork,
                parallel,
                &mut || {
                    low = Some(one_table(tensors, &hasher, Some(0)));
                    beside();
                },
                &mut || high = Some(one_table(tensors, &hasher, Some(1))),
            );
            let low = low.unwrap_or_else(|| one_table(tensors, &hasher, Some(0)));
            let high = high.unwrap_or_else(|| one_table(tensors, &hasher, Some(1)));
            match (low, high) {
                (Ok(low), Ok(high)) => Ok(vec![low, high]),
                (Err(a), Err(b)) => Err(a.min(b)),
                (Err(a), _) | (_, Err(a)) => Err(a),
            }
        } else {
            let job = Job { tensors, hasher: &hasher, bits };
            let mid = tensors.len() / 2;
            let (mut low, mut high) = (None, None);
            run(fork, parallel, &mut || low = Some(job.group(0..mid)), &mut || {
                high = Some(job.group(mid..tensors.len()))
            });
            let low = low.unwrap_or_else(|| job.group(0..mid));
            let high = high.unwrap_or_else(|| job.group(mid..tensors.len()));
            let groups = [&low, &high];
            let tables = 1usize << bits;
            let (mut first, mut second) = (None, None);
            run(
                fork,
                parallel,
                &mut || {
                    first = Some(job.tables(0..tables / 2, groups));
                    beside();
                },
                &mut || second = Some(job.tables(tables / 2..tables, groups)),
            );
            let first = first.unwrap_or_else(|| job.tables(0..tables / 2, groups));
            let second = second.unwrap_or_else(|| job.tables(tables / 2..tables, groups));
            match (first, second) {
                (Ok(mut first), Ok(second)) => {
                    first.extend(second);
                    Ok(first)
                }
                (Err(a), Err(b)) => Err(a.min(b)),
                (Err(a), _) | (_, Err(a)) => Err(a),
            }
        };
        match built {
            Ok(tables) => Ok(Index { tables, bits, hasher }),
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
        let table = self.tables.get(table_of(hash, self.bits))?;
        table.find(hash, |&j| tensors.get(j as usize).is_some_and(|t| t.name == name)).map(|&j| j as usize)
    }
}

/// Runs `a` and `b` through `fork` when `parallel`, else one after the other.
fn run(fork: &dyn Fork, parallel: bool, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
    if parallel {
        fork.join(a, b);
    } else {
        a();
        b();
    }
}

/// The name at position `j` of `tensors` ("" past the end, which no
/// header's tensor is named).
fn name_at(tensors: &[TensorInfo], j: u32) -> &str {
    tensors.get(j as usize).map(|t| t.name.as_str()).unwrap_or_default()
}

/// The table of every name of `tensors` (or, for `Some(t)`, of those in
/// table `t` of two), or the position of the first of them that repeats an
/// earlier one.
fn one_table(
    tensors: &[TensorInfo],
    hasher: &DefaultHashBuilder,
    only: Option<usize>,
) -> core::result::Result<HashTable<u32>, usize> {
    let room = if only.is_some() { tensors.len() / 2 + tensors.len() / 32 } else { tensors.len() };
    let mut table = HashTable::with_capacity(room);
    for (i, t) in tensors.iter().enumerate() {
        let hash = hasher.hash_one(t.name.as_str());
        if only.is_some_and(|which| table_of(hash, 1) != which) {
            continue;
        }
        let entry =
            table.entry(hash, |&j| name_at(tensors, j) == t.name.as_str(), |&j| hasher.hash_one(name_at(tensors, j)));
        match entry {
            hashbrown::hash_table::Entry::Occupied(_) => return Err(i),
            // `tensors.len()` is bounded by `Limits::max_tensors`, at most u32::MAX.
            hashbrown::hash_table::Entry::Vacant(v) => _ = v.insert(i as u32),
        }
    }
    Ok(table)
}

/// A stretch of the list grouped by table: the positions and hashes of
/// table `t`'s names at `starts[t]..starts[t + 1]`, in list order.
struct Group {
    starts: Vec<usize>,
    positions: Vec<u32>,
    hashes: Vec<u64>,
}

/// What building a large index shares between its two threads.
#[derive(Clone, Copy)]
struct Job<'a> {
    tensors: &'a [TensorInfo],
    hasher: &'a DefaultHashBuilder,
    bits: u32,
}

impl Job<'_> {
    /// The names at positions `range`, grouped by table: hashed once to
    /// count each table's, once more to write them in place.
    fn group(&self, range: Range<usize>) -> Group {
        let stretch = self.tensors.get(range.clone()).unwrap_or_default();
        let tables = 1usize << self.bits;
        let hash = |t: &TensorInfo| self.hasher.hash_one(t.name.as_str());
        // Each table's count, then (a running sum) where each table's
        // names start; the last entry is the stretch's length.
        let mut starts = vec![0usize; tables + 1];
        for t in stretch {
            if let Some(n) = starts.get_mut(table_of(hash(t), self.bits)) {
                *n += 1;
            }
        }
        let mut sum = 0;
        for start in &mut starts {
            (*start, sum) = (sum, sum + *start);
        }
        let mut next = starts.clone();
        let (mut positions, mut hashes) = (vec![0u32; stretch.len()], vec![0u64; stretch.len()]);
        for (i, t) in (range.start..).zip(stretch) {
            let h = hash(t);
            let Some(at) = next.get_mut(table_of(h, self.bits)) else { continue };
            if let (Some(p), Some(slot)) = (positions.get_mut(*at), hashes.get_mut(*at)) {
                // Positions are below `Limits::max_tensors`, at most u32::MAX.
                *p = i as u32;
                *slot = h;
            }
            *at += 1;
        }
        Group { starts, positions, hashes }
    }

    /// Tables `range`, each filled from both groups (the first stretch of
    /// the list, then the second: list order), or the position of the
    /// first name in list order among them that repeats an earlier one.
    fn tables(&self, range: Range<usize>, groups: [&Group; 2]) -> core::result::Result<Vec<HashTable<u32>>, usize> {
        let mut out = Vec::with_capacity(range.len());
        let mut repeat: Option<usize> = None;
        for t in range {
            let spans = groups.map(|g| {
                let span = g.starts.get(t).copied().unwrap_or(0)..g.starts.get(t + 1).copied().unwrap_or(0);
                (g.positions.get(span.clone()).unwrap_or_default(), g.hashes.get(span).unwrap_or_default())
            });
            let mut table = HashTable::with_capacity(spans.iter().map(|(p, _)| p.len()).sum());
            'fill: for (positions, hashes) in spans {
                for (&i, &hash) in positions.iter().zip(hashes) {
                    // The names are read only when their hashes' tags
                    // match: each read is a cache miss.
                    let entry = table.entry(
                        hash,
                        |&j| name_at(self.tensors, j) == name_at(self.tensors, i),
                        |&j| self.hasher.hash_one(name_at(self.tensors, j)),
                    );
                    match entry {
                        hashbrown::hash_table::Entry::Occupied(_) => {
                            // The first repeat of this table; later ones
                            // come later in the list.
                            repeat = Some(repeat.map_or(i as usize, |r| r.min(i as usize)));
                            break 'fill;
                        }
                        hashbrown::hash_table::Entry::Vacant(v) => _ = v.insert(i),
                    }
                }
            }
            out.push(table);
        }
        repeat.map_or(Ok(out), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Dtype, Serial, Shape};

    fn tensors(names: &[alloc::string::String]) -> Vec<TensorInfo> {
        names
            .iter()
            .map(|n| TensorInfo {
                name: n.as_str().into(),
                dtype: Dtype::U8,
                shape: Shape::new(&[]),
                data_offsets: (0, 0),
                metadata: Default::default(),
                sha256: None,
            })
            .collect()
    }

    /// A fork that runs its jobs one after the other, the second first,
    /// but says it is parallel: the two-thread path, deterministically.
    struct Split;

    impl Fork for Split {
        fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
            b();
            a();
        }
    }

    #[test]
    fn tables_are_picked_by_list_length() {
        assert_eq!(table_bits(0), 0);
        assert_eq!(table_bits(TABLE_NAMES), 0);
        assert_eq!(table_bits(TABLE_NAMES + 1), 1);
        assert_eq!(table_bits(10_000_000), 9);
        assert_eq!(table_bits(u32::MAX as usize), MAX_BITS);
        assert_eq!(table_of(u64::MAX, 0), 0);
        assert_eq!(table_of(u64::MAX, 9), 511);
        assert_eq!(table_of(0xffff_fe00_ffff_ffff, 9), 0);
    }

    #[test]
    fn every_name_is_found_at_its_position_however_the_tables_are_split() {
        for n in [0, 1, 3_000, 40_000, 70_000] {
            let names: Vec<alloc::string::String> = (0..n).map(|i| alloc::format!("layer.{i}.weight")).collect();
            let list = tensors(&names);
            for fork in [&Serial as &dyn Fork, &Split] {
                let mut ran = 0;
                let index = Index::build(Format::Deathtensors, &list, fork, &mut || ran += 1).unwrap();
                assert_eq!(ran, 1);
                assert_eq!(index.tables.len(), 1 << index.bits);
                assert_eq!(index.tables.iter().map(|t| t.len()).sum::<usize>(), n);
                for (i, name) in names.iter().enumerate() {
                    assert_eq!(index.find(&list, name), Some(i), "{name} of {n}");
                }
                assert_eq!(index.find(&list, "layer.x.weight"), None);
            }
        }
        assert_eq!(Index::default().find(&[], "x"), None);
    }

    #[test]
    fn the_first_repeat_in_list_order_is_reported_whichever_table_holds_it() {
        for n in [100, 4_000, 40_000, 70_000] {
            let mut names: Vec<alloc::string::String> = (0..n).map(|i| alloc::format!("t{i}")).collect();
            // Repeats after every original, of names in various tables: the
            // first in list order is the one reported; then the same with
            // a repeat in the first stretch of the list.
            for repeat in ["t17", "t5", "t99", "t0", "t42"] {
                names.push(repeat.into());
            }
            for fork in [&Serial as &dyn Fork, &Split] {
                let e = Index::build(Format::Safetensors, &tensors(&names), fork, &mut || {}).unwrap_err();
                assert_eq!(e.kind(), &ErrorKind::DuplicateKey { within: "header", key: "t17".into() });
                let mut early = names.clone();
                early[50] = "t3".into();
                let e = Index::build(Format::Deathtensors, &tensors(&early), fork, &mut || {}).unwrap_err();
                assert_eq!(e.kind(), &ErrorKind::DuplicateKey { within: "tensors", key: "t3".into() });
            }
        }
    }
}
