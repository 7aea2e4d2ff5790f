//! The header decoder's second thread: a [`Fork`] over std's scoped threads.

use std::sync::Mutex;

use deathtensors_format::Fork;

/// Runs the second job on a scoped thread of its own (or on the caller's,
/// if a thread cannot be started).
pub(crate) struct Threads;

impl Fork for Threads {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        // Whichever thread takes `b` runs it: the new one, or this one if
        // the new one cannot start.
        let b = Mutex::new(Some(b));
        let run_b = || {
            if let Some(b) = b.lock().ok().and_then(|mut b| b.take()) {
                b();
            }
        };
        std::thread::scope(|s| {
            let other = std::thread::Builder::new().name("deathtensors-decode".into()).spawn_scoped(s, run_b);
            a();
            match other {
                // The decoder's jobs never panic; if one did, re-raise it here.
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(_) => run_b(),
            }
        });
    }
}
