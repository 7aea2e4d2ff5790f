//! Digests of full blocks computed in the background while the writer goes
//! on appending: a block that fills is hashed from the page cache on a
//! thread of its own, so that a commit finds most digests ready instead of
//! reading every new block back.
//!
//! A digest is keyed by the block file and the block's write count when it
//! was queued: a block written again after that (an overwrite of rows not
//! yet committed) has another count, and its stale digest is never used.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::block::BlockFile;
use crate::fs::sha_lanes::Input;

/// Which bytes a digest is of: the block file and its write count.
pub(crate) type Key = (String, u64);

struct Job {
    key: Key,
    block: Arc<BlockFile>,
    len: u64,
}

/// Digests done, and how many jobs are queued or running.
#[derive(Default)]
struct Shared {
    done: Mutex<(HashMap<Key, [u8; 32]>, usize)>,
    idle: Condvar,
}

/// The background hasher of one writer; its thread starts with the first
/// job and ends when the writer is dropped.
#[derive(Default)]
pub(crate) struct Hasher {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hasher").field("running", &self.thread.is_some()).finish()
    }
}

impl Hasher {
    /// Queues the SHA-256 of the first `len` bytes of rows of `block`.
    pub(crate) fn submit(&mut self, key: Key, block: Arc<BlockFile>, len: u64) {
        if self.tx.is_none() {
            let (tx, rx) = channel::<Job>();
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name("deathtensors-hash".into()).spawn(move || {
                while let Ok(first) = rx.recv() {
                    // Everything queued meanwhile goes in one batch: two
                    // streams a core.
                    let jobs: Vec<Job> = std::iter::once(first).chain(rx.try_iter()).collect();
                    let inputs: Vec<Input<'_>> = jobs
                        .iter()
                        .map(|j| Input::File { file: &j.block.file, offset: j.block.data_start, len: j.len })
                        .collect();
                    let digests = crate::fs::sha_lanes::digests(&inputs).ok();
                    let mut done = shared.done.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(digests) = digests {
                        for (job, d) in jobs.iter().zip(digests) {
                            done.0.insert(job.key.clone(), d);
                        }
                    }
                    // A failed read leaves no digest: the commit hashes again
                    // and reports the error.
                    done.1 -= jobs.len();
                    if done.1 == 0 {
                        shared.idle.notify_all();
                    }
                }
            });
            match spawned {
                Ok(thread) => {
                    self.tx = Some(tx);
                    self.thread = Some(thread);
                }
                // No thread: the commit hashes instead.
                Err(_) => return,
            }
        }
        let Some(tx) = &self.tx else { return };
        self.shared.done.lock().unwrap_or_else(PoisonError::into_inner).1 += 1;
        if tx.send(Job { key, block, len }).is_err() {
            self.shared.done.lock().unwrap_or_else(PoisonError::into_inner).1 -= 1;
        }
    }

    /// Waits for the queued jobs, then takes every digest done (by key).
    pub(crate) fn finish(&self) -> HashMap<Key, [u8; 32]> {
        let mut done = self.shared.done.lock().unwrap_or_else(PoisonError::into_inner);
        while done.1 > 0 {
            done = self.shared.idle.wait(done).unwrap_or_else(PoisonError::into_inner);
        }
        std::mem::take(&mut done.0)
    }
}

impl Drop for Hasher {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
