//! `Fork::prefault` and `Fork::prefault_bytes`: the decoder announces the
//! room its list of tensor entries and its blocks of names are about to
//! fill, in windows, before writing there; never room it has written, never
//! twice, and nothing for small lists.

use std::mem::MaybeUninit;
use std::sync::Mutex;

use deathtensors_format::{
    Dtype, Flags, Fork, Head, Header, Limits, Metadata, TensorInfo, TensorSpec, PREFAULT_MIN_ENTRIES,
};

/// Records every announced range (start address, entries), optionally
/// running the two jobs of a split at once.
struct Recorder {
    parallel: bool,
    announced: Mutex<Vec<(usize, usize)>>,
    /// The same for blocks of names (start address, bytes).
    bytes: Mutex<Vec<(usize, usize)>>,
}

impl Fork for Recorder {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        if self.parallel {
            std::thread::scope(|s| {
                let h = s.spawn(b);
                a();
                h.join().unwrap();
            });
        } else {
            a();
            b();
        }
    }

    fn is_parallel(&self) -> bool {
        self.parallel
    }

    fn prefault(&self, spare: &mut [MaybeUninit<TensorInfo>]) {
        assert!(!spare.is_empty(), "an empty range is never announced");
        self.announced.lock().unwrap().push((spare.as_ptr() as usize, spare.len()));
    }

    fn prefault_bytes(&self, spare: &mut [MaybeUninit<u8>]) {
        assert!(!spare.is_empty(), "an empty range is never announced");
        self.bytes.lock().unwrap().push((spare.as_ptr() as usize, spare.len()));
    }
}

fn recorder(parallel: bool) -> Recorder {
    Recorder { parallel, announced: Mutex::new(Vec::new()), bytes: Mutex::new(Vec::new()) }
}

fn bytes_of(n: usize) -> Vec<u8> {
    let specs = (0..n).map(|i| TensorSpec::new(format!("model.layers.{i:06}.mlp.experts.gate_proj"), Dtype::F32, [4]));
    let header = Header::new_deathtensors(specs.collect(), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let mut bytes = Head::encode(&header, Flags::EMPTY).unwrap();
    bytes.resize(bytes.len() + header.data_len() as usize, 0);
    bytes
}

/// Whether the ranges are pairwise disjoint.
fn disjoint(ranges: &[(usize, usize)]) -> bool {
    let size = std::mem::size_of::<TensorInfo>();
    let mut sorted = ranges.to_vec();
    sorted.sort();
    sorted.windows(2).all(|w| w[0].0 + w[0].1 * size <= w[1].0)
}

#[test]
fn a_large_list_is_announced_in_windows_that_cover_every_entry_once() {
    let n = 3 * PREFAULT_MIN_ENTRIES + 17;
    let bytes = bytes_of(n);
    let fork = recorder(false);
    let head = Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
    assert_eq!(head.header, Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap().header);
    let announced = fork.announced.into_inner().unwrap();
    assert!(disjoint(&announced), "{announced:?}");
    assert!(announced.iter().all(|&(_, len)| len <= PREFAULT_MIN_ENTRIES), "{announced:?}");
    // Every entry of the decoded list lies in announced room.
    let size = std::mem::size_of::<TensorInfo>();
    for t in head.header.tensors() {
        let at = t as *const TensorInfo as usize;
        assert!(announced.iter().any(|&(start, len)| at >= start && at + size <= start + len * size));
    }
    // ... and no more windows than the entries need, plus the one that was
    // started when the last filled up.
    assert!(announced.len() <= n.div_ceil(PREFAULT_MIN_ENTRIES) + 1, "{} windows", announced.len());
}

#[test]
fn two_halves_announce_their_own_room_and_the_room_the_second_is_moved_into() {
    // Large enough to be split (256 KiB of JSON).
    let n = 6000;
    let bytes = bytes_of(n);
    let fork = recorder(true);
    let head = Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
    assert_eq!(head.header, Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap().header);
    let announced = fork.announced.into_inner().unwrap();
    // The second half's own list and the first's room are different memory;
    // within each, windows never overlap. The final list is the first's:
    // every entry of it was announced.
    let size = std::mem::size_of::<TensorInfo>();
    for t in head.header.tensors() {
        let at = t as *const TensorInfo as usize;
        let covering = announced.iter().filter(|&&(start, len)| at >= start && at + size <= start + len * size);
        assert_eq!(covering.count(), 1, "entry at {at:#x}: {announced:?}");
    }
}

#[test]
fn a_small_list_announces_nothing() {
    let bytes = bytes_of(100);
    let fork = recorder(false);
    Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
    assert!(fork.announced.into_inner().unwrap().is_empty());
    assert!(fork.bytes.into_inner().unwrap().is_empty());
}

#[test]
fn the_names_of_a_large_list_are_written_in_blocks_announced_ahead() {
    for parallel in [false, true] {
        let n = 3 * PREFAULT_MIN_ENTRIES + 17;
        let bytes = bytes_of(n);
        let fork = recorder(parallel);
        let head = Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
        assert_eq!(head.header, Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap().header);
        let blocks = fork.bytes.into_inner().unwrap();
        let mut sorted = blocks.clone();
        sorted.sort();
        // Announced blocks never overlap, but where a last block was shrunk
        // to fit and the heap handed out what it gave back (Windows' heap
        // does): then its names end before the next block begins.
        let names_end_before = |start: usize, next: usize| {
            head.header.tensors().iter().all(|t| {
                let at = t.name.as_ptr() as usize;
                !(start..next).contains(&at) || at + t.name.len() <= next
            })
        };
        assert!(
            sorted
                .windows(2)
                .all(|w| w[0].0 + w[0].1 <= w[1].0 || (w[0].0 < w[1].0 && names_end_before(w[0].0, w[1].0))),
            "blocks overlap: {blocks:?}"
        );
        let names: usize = head.header.tensors().iter().map(|t| t.name.len()).sum();
        assert!(blocks.iter().map(|&(_, len)| len).sum::<usize>() >= names, "{blocks:?}");
        assert!(blocks.iter().all(|&(_, len)| len <= 32 << 10), "{blocks:?}");
        // Every name lies in an announced block, but those of a last block
        // that was shrunk to fit (and may have moved): at most one per half.
        let outside = head
            .header
            .tensors()
            .iter()
            .filter(|t| {
                let at = t.name.as_ptr() as usize;
                !blocks.iter().any(|&(start, len)| at >= start && at + t.name.len() <= start + len)
            })
            .count();
        let per_block = blocks.iter().map(|&(_, len)| len).min().unwrap() / head.header.tensors()[0].name.len();
        assert!(outside <= 2 * per_block, "{outside} names outside the announced blocks");
    }
}
