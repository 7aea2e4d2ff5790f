//! The header decoder's second thread: a [`Fork`] over std's scoped threads.

use std::sync::Mutex;

use deathtensors_format::Fork;

/// Runs the second job on a scoped thread of its own (or on the caller's,
/// if a thread cannot be started).
pub(crate) struct Threads;

impl Fork for Threads {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
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
            Threads.join(
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
            Threads.join(&mut || {}, &mut || ran_on = Some(std::thread::current().id()));
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
        Threads.join(&mut || _ = barrier.wait(), &mut || _ = barrier.wait());
    }
}
