//! A reader's snapshot: the committed state a manifest describes, with
//! every block file it names held open.
//!
//! A commit removes the block files it supersedes (copy on write, truncation,
//! a new collection over an old one). A reader that read manifest `g` and
//! opened its blocks later could find one gone, replaced by commit `g + 1`.
//! So a reader opens every block file of its state at once, right after
//! reading the manifest: an open descriptor keeps a removed file's rows
//! readable for as long as the reader lives. If a block is already gone and
//! the manifest has moved on, a commit came in between: the snapshot starts
//! over from the newer manifest, at most [`TRIES`] times within [`PATIENCE`].
//! Each try costs one manifest read and one `open` a block, so only a writer
//! that commits faster than that, again and again, exhausts the bound; the
//! error then says so.

use std::path::Path;
use std::time::{Duration, Instant};

use deathtensors_format::Manifest;

use super::block::open_file;
use super::commit;
use super::state::{Collection, Slot};
use crate::error::{Error, Result};

/// Snapshots started over at most, per open or refresh.
pub(crate) const TRIES: u32 = 64;

/// The time a snapshot may keep starting over, per open or refresh.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Opens the newest committed state of the collection at `dir`, read-only.
pub(crate) fn open(dir: &Path) -> Result<Collection> {
    let slots = |manifest: &Manifest| manifest.blocks.iter().map(Slot::from_ref).collect();
    let (manifest, slots) = take(dir, None, slots)?;
    let mut c = Collection::from_manifest(dir, manifest, None);
    c.slots = slots;
    Ok(c)
}

/// Moves a reader `c` to the newest committed state, keeping the handles of
/// the blocks both states name; false if it is the state `c` has. On an
/// error `c` is unchanged.
pub(crate) fn refresh(c: &mut Collection) -> Result<bool> {
    let dir = c.dir.clone();
    let slots = |manifest: &Manifest| -> Vec<Slot> {
        manifest
            .blocks
            .iter()
            .map(|b| {
                let slot = Slot::from_ref(b);
                // Still open in this reader: no need to pin it again.
                if let Some(h) = c.slots.iter().find(|s| s.file == b.file).and_then(|s| s.handle.get()) {
                    let _ = slot.handle.set(h.clone());
                }
                slot
            })
            .collect()
    };
    // The same file names in both states stand for the same rows: committed
    // block files are never written in place.
    let current = c.generation;
    let (manifest, slots) = take(&dir, Some(current), slots)?;
    if manifest.generation == current {
        return Ok(false);
    }
    c.slots = slots;
    c.layout = manifest.layout;
    c.metadata = manifest.metadata;
    c.generation = manifest.generation;
    Ok(true)
}

/// Reads the manifest and pins the block files of its state (those `slots`
/// made for it do not hold open already), starting over while a newer
/// commit removes one first. With `unless` the generation a reader has,
/// nothing is pinned when the manifest still has it.
fn take(
    dir: &Path,
    unless: Option<u64>,
    mut slots: impl FnMut(&Manifest) -> Vec<Slot>,
) -> Result<(Manifest, Vec<Slot>)> {
    let started = Instant::now();
    let mut tries = 0u32;
    loop {
        tries += 1;
        let manifest = commit::read_manifest(dir)?;
        if unless == Some(manifest.generation) {
            return Ok((manifest, Vec::new()));
        }
        let made = slots(&manifest);
        match pin(dir, &made) {
            Pinned::All => return Ok((manifest, made)),
            Pinned::Gone(file) => {
                // Gone, and named by the manifest we read: either a newer
                // commit removed it (start over), or the collection is
                // damaged (the read of that block will say so).
                let newer = commit::read_manifest(dir).map(|m| m.generation != manifest.generation)?;
                if !newer {
                    return Ok((manifest, made));
                }
                if tries >= TRIES || started.elapsed() >= PATIENCE {
                    return Err(Error::input(
                        format!(
                            "no committed state could be opened: {tries} times in {:.1} s a newer commit removed \
                             a block file (last {file}) before it was opened; the writer commits faster than a \
                             reader can open its {} block files",
                            started.elapsed().as_secs_f64(),
                            manifest.blocks.len(),
                        ),
                        dir,
                        "cannot open collection",
                    ));
                }
                // Let the writer finish its cleanup before looking again.
                std::thread::sleep(Duration::from_micros(100 << tries.min(6)));
            }
        }
    }
}

/// What pinning a state's block files found.
enum Pinned {
    /// Every block file is open (or failed for a reason its read reports).
    All,
    /// This block file was not found.
    Gone(String),
}

/// Opens the block files of `slots` that are not open yet, keeping each
/// descriptor in its slot.
fn pin(dir: &Path, slots: &[Slot]) -> Pinned {
    for slot in slots.iter().filter(|s| s.handle.get().is_none()) {
        match open_file(&dir.join(&slot.file), false) {
            Ok(file) => *slot.pinned.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(file),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Pinned::Gone(slot.file.clone()),
            // A symbolic link, say: left to the block's read, which names it.
            Err(_) => {}
        }
    }
    Pinned::All
}
