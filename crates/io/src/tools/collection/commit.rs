//! Committing a collection's working state, reading the committed one back,
//! and cleaning up after an interrupted commit.
//!
//! A commit is: (1) sync every block file written since the last commit,
//! (2) hash the full blocks that have no digest yet, (3) write the new
//! manifest to a temp file, sync it, rename it over `collection.json` and
//! sync the directory, (4) remove the block files the new manifest no
//! longer names. A crash before the rename leaves the previous manifest in
//! force and new block files it does not name, removed by the next writer;
//! a crash after it leaves the new state and superseded files, likewise.

use std::io::Read;
use std::path::Path;

use deathtensors_format::{check_block_name, BlockRef, Manifest, MANIFEST_NAME, MAX_MANIFEST_LEN};

use super::state::{Collection, CollectionKind};
use crate::error::{Error, ErrorKind, Result};
use crate::fs::atomic;
use crate::fs::sha_lanes::Input;

/// Reads and checks the manifest of the collection at `dir`.
pub(crate) fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST_NAME);
    let doing = "cannot open collection";
    let file = std::fs::File::open(&path).map_err(|e| Error::io(e, &path, doing))?;
    let len = file.metadata().map_err(|e| Error::io(e, &path, doing))?.len();
    Manifest::check_len(len).map_err(|e| Error::format(e, &path, doing))?;
    let mut bytes = Vec::new();
    // One byte past the limit tells a too-long manifest from one at the limit.
    file.take(MAX_MANIFEST_LEN + 1).read_to_end(&mut bytes).map_err(|e| Error::io(e, &path, doing))?;
    Manifest::parse(&bytes).map_err(|e| Error::format(e, &path, doing))
}

/// Whether `name` is a block file name our writers make.
pub(crate) fn is_our_block_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("blk-").and_then(|r| r.strip_suffix(".dt")) else { return false };
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_hexdigit());
    matches!(rest.split_once('-'), Some((g, s)) if hex(g, 16) && hex(s, 8))
}

/// Removes the block files of ours that `manifest` does not name: left by a
/// commit that was interrupted, or superseded by one whose cleanup was. Only
/// the writer calls it, holding the lock.
pub(crate) fn clean(dir: &Path, manifest: &Manifest) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let named: std::collections::HashSet<&str> = manifest.blocks.iter().map(|b| b.file.as_str()).collect();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // A manifest temp file (`.collection.json.<pid>.<n>.dt-tmp`) is a
        // dead writer's: the lock is ours.
        let manifest_temp = name.starts_with(".collection.json.") && name.ends_with(".dt-tmp");
        if (is_our_block_name(name) && !named.contains(name)) || manifest_temp {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub(crate) fn flush(c: &mut Collection) -> Result<()> {
    let Some(w) = c.writer.as_ref() else { return Ok(()) };
    if !w.changed {
        return Ok(());
    }
    let durable = w.durable;
    // (1) the rows and (2) the digests of full blocks, at once: one thread
    // waits for the disk while the others hash from the page cache.
    let cap = c.layout.block_rows;
    let dirty = if durable {
        c.slots.iter().enumerate().filter(|(_, s)| s.dirty).map(|(b, _)| c.block(b)).collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    // Digests the background hasher made of the blocks as they are now.
    let mut ready = w.hasher.finish();
    let mut to_hash = Vec::new();
    for (b, slot) in c.slots.iter_mut().enumerate() {
        if slot.rows == cap && slot.sha256.is_none() {
            match ready.remove(&(slot.file.clone(), slot.version)) {
                Some(d) => slot.sha256 = Some(d),
                None => to_hash.push(b),
            }
        }
    }
    let (synced, digests) = std::thread::scope(|s| {
        let syncer = (!dirty.is_empty()).then(|| s.spawn(|| dirty.iter().try_for_each(|b| b.sync())));
        let digests = hash_blocks(c, &to_hash);
        let synced = syncer.map_or(Ok(()), |j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (synced, digests)
    });
    synced?;
    for (b, d) in to_hash.iter().zip(digests?) {
        c.slots[*b].sha256 = Some(d);
    }
    // (3) the manifest.
    let manifest = Manifest {
        layout: c.layout.clone(),
        generation: c.generation + 1,
        metadata: c.metadata.clone(),
        blocks: c.slots.iter().map(|s| BlockRef { file: s.file.clone(), rows: s.rows, sha256: s.sha256 }).collect(),
    };
    let bytes = manifest.to_bytes().map_err(|e| Error::format(e, &c.dir, "cannot commit"))?;
    if durable && c.slots.iter().any(|s| !s.committed) {
        // The new block files' names are durable before the manifest that
        // names them can be (POSIX orders nothing across a rename).
        atomic::sync_dir(&c.dir).map_err(|e| Error::io(e, &c.dir, "cannot commit"))?;
    }
    let path = c.dir.join(MANIFEST_NAME);
    write_manifest(&path, &bytes, durable).map_err(|e| Error::io(e, &path, "cannot commit"))?;
    // Committed: the new state is the one on disk.
    c.generation = manifest.generation;
    for slot in &mut c.slots {
        slot.committed = true;
        slot.frozen = slot.rows;
        slot.dirty = false;
        slot.writeback = None;
    }
    // (4) files no longer named. A reader of an older state that has not
    // opened one yet is told to refresh.
    if let Some(w) = c.writer.as_mut() {
        for file in w.superseded.drain(..) {
            let _ = std::fs::remove_file(c.dir.join(file));
        }
        w.changed = false;
    }
    // Windows removes no file a reader has open: the blocks earlier commits
    // could not remove go at the first commit after their readers closed.
    if cfg!(windows) {
        clean(&c.dir, &manifest);
    }
    Ok(())
}

/// Replaces the manifest. Readers hold it open only while they read it,
/// but Windows refuses to replace a file that is open: there a refused
/// replacement is tried again, for up to a second, before the commit fails
/// (and leaves the old manifest, the committed state, as it was).
fn write_manifest(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match atomic::write_file(path, bytes, durable) {
            Err(e) if cfg!(windows) && e.kind() == std::io::ErrorKind::PermissionDenied && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            result => return result,
        }
    }
}

/// SHA-256 of the rows of each block in `blocks`, on all cores, two
/// streams a core.
fn hash_blocks(c: &Collection, blocks: &[usize]) -> Result<Vec<[u8; 32]>> {
    let handles = blocks.iter().map(|&b| c.block(b)).collect::<Result<Vec<_>>>()?;
    let len = c.layout.block_bytes();
    let inputs: Vec<Input<'_>> =
        handles.iter().map(|h| Input::File { file: &h.file, offset: h.data_start, len }).collect();
    crate::fs::sha_lanes::digests(&inputs).map_err(|e| Error::io(e, &c.dir, "cannot hash the blocks of"))
}

/// Checks every block file and every recorded digest.
pub(crate) fn verify(c: &Collection) -> Result<u64> {
    verify_blocks(c, 0..c.slots.len())
}

/// Checks the block files `blocks` and their recorded digests; returns how
/// many blocks had their rows hashed.
pub(crate) fn verify_blocks(c: &Collection, blocks: std::ops::Range<usize>) -> Result<u64> {
    let mut hashed = Vec::new();
    for (b, slot) in c.slots.iter().enumerate().take(blocks.end).skip(blocks.start) {
        if c.kind == CollectionKind::Deathtensors {
            check_block_name(&slot.file).map_err(|e| Error::input(e, &c.dir, "cannot verify"))?;
        }
        c.block(b)?;
        if slot.sha256.is_some() && slot.rows == c.layout.block_rows {
            hashed.push(b);
        }
    }
    let digests = hash_blocks(c, &hashed)?;
    for (&b, actual) in hashed.iter().zip(digests) {
        let slot = &c.slots[b];
        let expected = slot.sha256.unwrap_or_default();
        if expected != actual {
            let path = c.dir.join(&slot.file);
            return Err(Error::new(
                ErrorKind::BlockDigestMismatch { block: format!("block {b} ({})", slot.file), expected, actual },
                Some(&path),
                "cannot verify",
            ));
        }
    }
    Ok(hashed.len() as u64)
}
