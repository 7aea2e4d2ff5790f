//! The header decoder's second thread: a [`Fork`] over std's scoped
//! threads, which also maps the decoder's room for tensor entries in bulk
//! (`prefault.rs`) and drops the pages of a mapped header it is done with.

use std::mem::MaybeUninit;
use std::sync::{Mutex, OnceLock};

use deathtensors_format::{Fork, TensorInfo};

use crate::fs::mmap::Mmap;

/// Runs the second job on a scoped thread of its own (or on the caller's,
/// if a thread cannot be started), unless this process's own threads
/// already keep every core busy: then the decoder does not split its work.
/// Made for one header; it looks at the threads once, when first asked.
/// Made with [`Threads::releasing`], it drops from memory the pages of the
/// file's mapping the decoder is done with ([`Fork::release`]).
#[derive(Default)]
pub(crate) struct Threads<'m> {
    parallel: OnceLock<bool>,
    /// The mapping the header is decoded from, if it is.
    mapped: Option<&'m Mmap>,
}

impl<'m> Threads<'m> {
    /// Threads for a header decoded from `map`.
    pub(crate) fn releasing(map: &'m Mmap) -> Threads<'m> {
        Threads { parallel: OnceLock::new(), mapped: Some(map) }
    }
}

impl Fork for Threads<'_> {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        if self.is_parallel() {
            on_two_threads(a, b);
        } else {
            a();
            b();
        }
    }

    fn is_parallel(&self) -> bool {
        *self.parallel.get_or_init(|| lend_a_thread(crate::fs::hash::threads(), own_threads_fill_the_cores))
    }

    fn prefault(&self, spare: &mut [MaybeUninit<TensorInfo>]) {
        crate::fs::prefault::populate(spare);
    }

    fn prefault_bytes(&self, spare: &mut [MaybeUninit<u8>]) {
        crate::fs::prefault::populate(spare);
    }

    fn release(&self, done: &[u8]) {
        if let Some(map) = self.mapped {
            map.release(done);
        }
    }
}

/// Threads of this process beyond this many are not looked at: each costs
/// 2-4 µs to read, and the check must stay small beside the decoding it
/// decides on (~0.3 ms for the smallest header that is split). Spinning
/// library workers are started early, so they come first in the listing.
const MAX_THREADS_CHECKED: usize = 16;

/// Whether a second thread would run beside the caller on `cores` cores
/// (what this process may use: affinity mask, CPU quota): there must be two
/// or more, and this process's own threads must not already keep them all
/// busy (`busy`, asked only when there are).
///
/// - With one core, a second thread only takes turns with the caller: a
///   20,000-tensor file pinned to one core opened in 3.61 ms split against
///   3.06 ms decoded by the caller alone (fresh processes).
/// - A new thread on a core that one of this process's threads is spinning
///   on (OpenBLAS's workers spin for ~0.1 s after `import numpy`) gets half
///   of it at best, and the caller waits for it: the same header took
///   1.4 ms longer that way than decoded by the caller alone.
fn lend_a_thread(cores: usize, busy: impl FnOnce(usize) -> bool) -> bool {
    cores >= 2 && !busy(cores)
}

/// Whether at least `cores` of this process's threads are running (the
/// caller among them): from the state letters in `/proc/self/task/*/stat`.
/// `false` where that cannot be read, and off Linux.
fn own_threads_fill_the_cores(cores: usize) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return false };
    let mut running = 0;
    let mut stat = [0u8; 512];
    for task in tasks.take(MAX_THREADS_CHECKED).flatten() {
        let Ok(mut f) = std::fs::File::open(task.path().join("stat")) else { continue };
        let n = std::io::Read::read(&mut f, &mut stat).unwrap_or(0);
        if thread_state(&stat[..n]) == Some(b'R') {
            running += 1;
            if running >= cores {
                return true;
            }
        }
    }
    false
}

/// The state letter of a `/proc/<pid>/task/<tid>/stat` line: the field
/// after the command name, which is in parentheses and may itself hold
/// spaces and parentheses (hence the last `)`).
fn thread_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&c| c == b')')?;
    match stat.get(close + 1..close + 3)? {
        [b' ', state] => Some(*state),
        _ => None,
    }
}

/// Runs `a` here and `b` on a new scoped thread, or here after `a` if the
/// new thread has not started it by then.
fn on_two_threads(a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
    // Whichever thread takes `b` first runs it: the new one, or this
    // one once `a` is done, if the new one has not started it by then
    // (or cannot start at all).
    let b = Mutex::new(Some(b));
    let run_b = || {
        if let Some(b) = b.lock().ok().and_then(|mut b| b.take()) {
            b();
        }
    };
    std::thread::scope(|s| {
        let other = std::thread::Builder::new().name("deathtensors-decode".into()).spawn_scoped(s, run_b);
        a();
        // If the new thread has not started `b` yet (its core is busy,
        // say with another library's spinning threads), this one runs
        // it rather than wait for a core.
        run_b();
        if let Ok(h) = other {
            // The decoder's jobs never panic; if one did, re-raise it here.
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_job_runs_exactly_once() {
        for round in 0..500 {
            let (a_runs, b_runs) = (AtomicUsize::new(0), AtomicUsize::new(0));
            // Some rounds keep `a` busy, so the new thread takes `b`; in the
            // others `a` is instant, so this thread often takes it first.
            let slow_a = round % 2 == 0;
            on_two_threads(
                &mut || {
                    if slow_a {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    a_runs.fetch_add(1, Ordering::SeqCst);
                },
                &mut || {
                    b_runs.fetch_add(1, Ordering::SeqCst);
                },
            );
            assert_eq!((a_runs.into_inner(), b_runs.into_inner()), (1, 1), "round {round}");
        }
    }

    #[test]
    fn the_caller_runs_b_when_the_new_thread_is_late() {
        // `b` records the thread it ran on; `a` returns at once, so unless the
        // new thread starts within microseconds, this thread runs `b` itself
        // instead of waiting. Both outcomes are correct; across many rounds
        // the caller must take some (the new thread needs ~50 µs to start).
        let caller = std::thread::current().id();
        let mut by_caller = 0;
        for _ in 0..200 {
            let mut ran_on = None;
            on_two_threads(&mut || {}, &mut || ran_on = Some(std::thread::current().id()));
            by_caller += usize::from(ran_on == Some(caller));
        }
        assert!(by_caller > 0, "the caller never ran `b`: it waited for the new thread every time");
    }

    #[test]
    fn both_jobs_can_run_at_once() {
        // Each job waits for the other: this returns only if they ran at the
        // same time, on two threads (when `b` was not taken by the caller
        // first, which `a` prevents by waiting here).
        let barrier = Barrier::new(2);
        on_two_threads(&mut || _ = barrier.wait(), &mut || _ = barrier.wait());
    }

    #[test]
    fn each_job_runs_exactly_once_whichever_way_join_goes() {
        let (a_runs, b_runs) = (AtomicUsize::new(0), AtomicUsize::new(0));
        Threads::default()
            .join(&mut || _ = a_runs.fetch_add(1, Ordering::SeqCst), &mut || _ = b_runs.fetch_add(1, Ordering::SeqCst));
        assert_eq!((a_runs.into_inner(), b_runs.into_inner()), (1, 1));
    }

    #[test]
    fn a_thread_is_lent_only_beside_a_free_core() {
        let asked = std::cell::Cell::new(None);
        let busy = |answer: bool| {
            let asked = &asked;
            move |cores| {
                asked.set(Some(cores));
                answer
            }
        };
        // One core (or none known): never split, and no need to look.
        for cores in [0, 1] {
            assert!(!lend_a_thread(cores, busy(false)), "{cores} core(s)");
            assert_eq!(asked.take(), None, "the threads were read for {cores} core(s)");
        }
        // Two or more: split unless this process's threads fill them.
        for cores in [2, 3, 64] {
            assert!(lend_a_thread(cores, busy(false)), "{cores} free cores");
            assert_eq!(asked.take(), Some(cores));
            assert!(!lend_a_thread(cores, busy(true)), "{cores} busy cores");
        }
    }

    #[test]
    fn the_state_is_the_field_after_the_last_parenthesis() {
        assert_eq!(thread_state(b"4242 (python3) R 1 4242 4242 0 -1"), Some(b'R'));
        assert_eq!(thread_state(b"17 (a) b) (c) S 1 17"), Some(b'S'));
        assert_eq!(thread_state(b"17 (name with spaces) D 1"), Some(b'D'));
        for bad in [&b""[..], b"17 (x)", b"17 (x)R", b"17 x R 1"] {
            assert_eq!(thread_state(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn threads_spinning_on_every_other_core_are_seen() {
        // With one spinning thread per other core, this process's running
        // threads (the spinners and the caller, who is running while it
        // looks) fill every core.
        let cores = crate::fs::hash::threads();
        if cores < 2 {
            return;
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let started = Barrier::new(cores);
        let seen = std::thread::scope(|s| {
            for _ in 1..cores {
                s.spawn(|| {
                    started.wait();
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                });
            }
            started.wait();
            // A spinner may be descheduled at the instant its state is read
            // (the test harness runs other tests beside this one): a few
            // looks, one of which must see them all running.
            let seen = (0..50).any(|_| own_threads_fill_the_cores(cores));
            stop.store(true, Ordering::Relaxed);
            seen
        });
        assert!(seen, "{} spinning threads and the caller were never seen filling {cores} cores", cores - 1);
    }
}
