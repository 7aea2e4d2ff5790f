//! Memory mapped in bulk ahead of a writer. Memory the system has just
//! given a process is mapped page by page, on each page's first write; on
//! Linux 5.14 and later `MADV_POPULATE_WRITE` maps a whole range in one
//! call instead, which costs less than the faults it replaces (2 MiB of a
//! header's tensor entries: ~0.4 ms less here, see CHANGELOG.md, 0.5.0).

use std::mem::MaybeUninit;

/// Maps the pages that lie wholly inside `room` (memory this process owns,
/// not yet written) for writing, if the system can; contents are not
/// touched. Best effort: does nothing where the system cannot, and stops
/// trying after the first refusal (a kernel older than 5.14).
pub(crate) fn populate<T>(room: &mut [MaybeUninit<T>]) {
    #[cfg(target_os = "linux")]
    linux::populate(room.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(room));
    #[cfg(not(target_os = "linux"))]
    let _ = room;
}

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::atomic::{AtomicBool, Ordering};

    use rustix::mm::{madvise, Advice};

    /// Set once the kernel refused: later calls would fail the same way.
    static REFUSED: AtomicBool = AtomicBool::new(false);

    /// Whether the kernel refused (too old for `MADV_POPULATE_WRITE`).
    pub(super) fn refused() -> bool {
        REFUSED.load(Ordering::Relaxed)
    }

    pub(super) fn populate(start: *mut u8, len: usize) {
        if len == 0 || refused() {
            return;
        }
        let page = rustix::param::page_size();
        let addr = start as usize;
        // Only whole pages: the partial ones at the ends may hold other
        // allocations, and are written soon enough anyway.
        let (Some(first), Some(end)) = (addr.checked_next_multiple_of(page), addr.checked_add(len)) else {
            return;
        };
        let last = end - end % page;
        if last <= first {
            return;
        }
        // SAFETY: [first, last) lies inside `room`, memory this process
        // owns and may write; MADV_POPULATE_WRITE only maps its pages as a
        // write would, without changing what they hold (nothing has been
        // written there yet), and fails without effect where it cannot.
        let r = unsafe { madvise(first as *mut std::ffi::c_void, last - first, Advice::LinuxPopulateWrite) };
        if r == Err(rustix::io::Errno::INVAL) {
            REFUSED.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populating_room_keeps_what_was_written_before_it_and_the_room_stays_writable() {
        let mut v: Vec<u64> = Vec::with_capacity(1 << 20);
        v.extend(0..100);
        populate(v.spare_capacity_mut());
        // The entries written before the room are intact, and the room is
        // still writable.
        assert!(v.iter().copied().eq(0..100));
        v.extend(100..(1 << 20));
        assert_eq!(v[(1 << 20) - 1], (1 << 20) - 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn populated_pages_are_not_faulted_in_again() {
        fn minor_faults() -> u64 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.split(' ').nth(7).unwrap().parse().unwrap()
        }
        // Each round writes 8 MiB that was not populated (the control) and
        // 8 MiB that was. A round counts only if the control faulted in most
        // of its 2,048 pages: its memory was fresh, and no fork by another
        // test of this process (policies are evaluated in a forked child)
        // write-protected the pages between the populate and the writes,
        // which makes every write fault however the pages were made. All
        // buffers stay allocated, so no round reuses another's memory.
        const LEN: usize = 8 << 20;
        let mut kept = Vec::new();
        let mut rounds = Vec::new();
        for _ in 0..8 {
            let mut control: Vec<u8> = Vec::with_capacity(LEN);
            let mut v: Vec<u8> = Vec::with_capacity(LEN);
            populate(v.spare_capacity_mut());
            if linux::refused() {
                return; // a kernel older than 5.14: nothing to compare
            }
            let start = minor_faults();
            control.resize(LEN, 1);
            let middle = minor_faults();
            v.resize(LEN, 1);
            let (control_faults, faults) = (middle - start, minor_faults() - middle);
            if control_faults >= 1024 && faults < 64 {
                return;
            }
            rounds.push((control_faults, faults));
            kept.push((control, v));
        }
        panic!("(unpopulated, populated) page faults writing 8 MiB, by round: {rounds:?}");
    }
}
