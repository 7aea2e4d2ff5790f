//! The save protocol of a distributed checkpoint (docs/DISTRIBUTED.md, "The
//! commit protocol" and "A failed save"): the marker a save puts before any
//! rank writes ([`SaveMarker`]), whether a marker's save may still run
//! ([`SaveMarker::may_run`]), and which files a save removes, before its
//! ranks write ([`uncommitted_files`]) and after its commit
//! ([`after_commit_files`]).
//!
//! Sans-IO but for the clock and one question to the operating system
//! (whether a process of this host lives): the front end lists the store,
//! reads the markers and then the metadata documents, in that order, hands
//! what it saw over as a [`SaveListing`], and removes the names it gets
//! back. The order matters: a save that commits meanwhile puts its metadata
//! before it removes its marker, so its files are seen either as running or
//! as committed, never as neither.

use std::collections::{BTreeMap, BTreeSet};

use deathtensors_format::{
    parse_rank_file_name, parse_rank_metadata_name, rank_metadata_name, save_marker_name, DCP_METADATA,
};
use serde_json::{Map, Value};

/// How long, in seconds, a save whose marker names another host counts as
/// running (`StorageWriter(stale_after=...)`'s default, an hour): no host
/// can tell whether a process on another one still runs.
pub const DEFAULT_STALE_AFTER: f64 = 3600.0;

/// The process asking about saves: this host's name and the asking thread
/// as the front end names them (Python's thread idents are Python's, and
/// its host name is what earlier markers hold), the threads alive in this
/// process, this process's id and the time.
#[derive(Clone, Debug, PartialEq)]
pub struct SaveCaller {
    /// This host's name.
    pub host: String,
    /// This process's id.
    pub pid: u64,
    /// The asking thread's ident.
    pub thread: u64,
    /// The idents of the threads alive in this process.
    pub live_threads: BTreeSet<u64>,
    /// Seconds since the Unix epoch.
    pub now: f64,
}

impl SaveCaller {
    /// The caller `thread` of this process on `host`, with the threads
    /// alive in it, now.
    pub fn new(host: &str, thread: u64, live_threads: BTreeSet<u64>) -> SaveCaller {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        SaveCaller { host: host.to_string(), pid: u64::from(std::process::id()), thread, live_threads, now }
    }
}

/// The marker of a save that has not committed,
/// `deathtensors.saving-<save id>.json` ([`save_marker_name`]): who runs
/// it (host, process, thread), since when, and, for a rank's own save or
/// file id, the rank. Its coordinator puts it before any rank writes and
/// removes it after the commit.
#[derive(Clone, Debug, PartialEq)]
pub struct SaveMarker {
    /// The save's id: the one its marker's name gives.
    pub save_id: String,
    /// The name of the host the save runs on.
    pub host: String,
    /// The id of the process that runs it.
    pub pid: u64,
    /// The ident of the thread that started it.
    pub thread: u64,
    /// When it started, in seconds since the Unix epoch.
    pub started: f64,
    /// The rank whose own save (or file id) it is, if it is one rank's.
    pub rank: Option<u64>,
}

impl SaveMarker {
    /// The marker of save `save_id` started now by `caller` (for one rank's
    /// own save or file id: with its `rank`).
    pub fn new(save_id: &str, caller: &SaveCaller, rank: Option<u64>) -> SaveMarker {
        SaveMarker {
            save_id: save_id.to_string(),
            host: caller.host.clone(),
            pid: caller.pid,
            thread: caller.thread,
            started: caller.now,
            rank,
        }
    }

    /// The marker's JSON document: `save_id`, `host`, `pid`, `thread`,
    /// `started` and, for one rank's, `rank`.
    pub fn encode(&self) -> Vec<u8> {
        let mut doc = serde_json::json!({
            "save_id": self.save_id, "host": self.host, "pid": self.pid, "thread": self.thread, "started": self.started,
        });
        if let Some(rank) = self.rank {
            doc["rank"] = rank.into();
        }
        doc.to_string().into_bytes()
    }

    /// The marker of save `save_id` (the id its name gives) from its
    /// document, or `None` if the document is not one: not a JSON object
    /// with a string `host`, integers `pid` and `thread` and a number
    /// `started`. A `rank` that is not an integer is ignored.
    pub fn parse(save_id: &str, data: &[u8]) -> Option<SaveMarker> {
        let doc = object(data)?;
        Some(SaveMarker {
            save_id: save_id.to_string(),
            host: doc.get("host")?.as_str()?.to_string(),
            pid: doc.get("pid")?.as_u64()?,
            thread: doc.get("thread")?.as_u64()?,
            started: doc.get("started")?.as_f64()?,
            rank: doc.get("rank").and_then(Value::as_u64),
        })
    }

    /// Whether the save may still run, as `caller` sees it: on its host,
    /// while its process lives (in the caller's process: while the thread
    /// that started it lives and is not the caller's, which starts a new
    /// save only once its last one has ended); started on another host,
    /// for `stale_after` seconds.
    pub fn may_run(&self, caller: &SaveCaller, stale_after: f64) -> bool {
        if self.host != caller.host {
            return caller.now - self.started < stale_after;
        }
        if self.pid == caller.pid {
            return self.thread != caller.thread && caller.live_threads.contains(&self.thread);
        }
        process_lives(self.pid)
    }
}

/// The JSON object `data` holds, or `None`.
fn object(data: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(data).ok()? {
        Value::Object(doc) => Some(doc),
        _ => None,
    }
}

/// Whether process `pid` of this host exists (when unsure: yes, a save
/// may still run).
fn process_lives(pid: u64) -> bool {
    crate::fs::process::lives(pid).unwrap_or(true)
}

/// What a save saw of a checkpoint's store, read in this order: the names
/// listed, then the save markers' documents (by save id; `None`: gone
/// since the listing), then the metadata documents' ([`metadata_documents`]
/// of the names, by name; `None`: gone since the listing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SaveListing {
    /// The names in the store.
    pub names: BTreeSet<String>,
    /// The markers' documents, by save id.
    pub markers: BTreeMap<String, Option<Vec<u8>>>,
    /// The metadata documents, by name.
    pub documents: BTreeMap<String, Option<Vec<u8>>>,
}

/// The metadata documents among `names`, sorted: the checkpoint's
/// ([`DCP_METADATA`]) and those of ranks that saved without collectives.
pub fn metadata_documents<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut docs: Vec<&str> =
        names.into_iter().filter(|n| *n == DCP_METADATA || parse_rank_metadata_name(n).is_some()).collect();
    docs.sort_unstable();
    docs
}

/// The names to remove before a save's ranks write: the rank files of
/// saves that did not commit and no longer run, and the markers of those
/// that no longer run. Kept: the files any committed metadata document
/// names, those of `own` (the caller's save), and those of any save whose
/// marker says it may still run ([`SaveMarker::may_run`]); a marker gone
/// or unreadable says it does not. With `rank` (a save without
/// collectives), only that rank's files, and markers naming that rank, are
/// looked at: no rank removes another's.
///
/// None at all when a metadata document is unreadable (not a JSON object
/// whose `files` is an object): it might name any file.
pub fn uncommitted_files(
    seen: &SaveListing,
    own: &str,
    rank: Option<u64>,
    caller: &SaveCaller,
    stale_after: f64,
) -> Vec<String> {
    uncommitted(seen, &[], own, rank, caller, stale_after)
}

/// [`uncommitted_files`], the documents `replaced` counting as committed
/// no more.
fn uncommitted(
    seen: &SaveListing,
    replaced: &[&str],
    own: &str,
    rank: Option<u64>,
    caller: &SaveCaller,
    stale_after: f64,
) -> Vec<String> {
    let mut committed = BTreeSet::new();
    let documents = seen.documents.iter().filter(|(name, _)| !replaced.contains(&name.as_str()));
    // A document gone since the listing names nothing now.
    for data in documents.filter_map(|(_, data)| data.as_ref()) {
        let Some(Value::Object(files)) = object(data).and_then(|mut doc| doc.remove("files")) else {
            return Vec::new();
        };
        committed.extend(files.into_iter().map(|(name, _)| name));
    }
    let markers = seen.markers.iter().filter(|(_, data)| rank.is_none() || marker_rank(data.as_deref()) == rank);
    let (running, stopped): (Vec<_>, Vec<_>) = markers.partition(|(id, data)| {
        *id == own
            || data.as_deref().and_then(|d| SaveMarker::parse(id, d)).is_some_and(|m| m.may_run(caller, stale_after))
    });
    let running: BTreeSet<&str> = running.into_iter().map(|(id, _)| id.as_str()).collect();
    let files = seen.names.iter().filter(|name| !committed.contains(*name)).filter(|name| {
        parse_rank_file_name(name).is_some_and(|(r, id)| !running.contains(id) && rank.is_none_or(|rank| r == rank))
    });
    files.cloned().chain(stopped.into_iter().map(|(id, _)| save_marker_name(id))).collect()
}

/// The rank a marker names (a rank's own save or file id), or `None`,
/// whether or not the rest of it is readable.
fn marker_rank(data: Option<&[u8]>) -> Option<u64> {
    object(data?)?.get("rank")?.as_u64()
}

/// The names to remove after save `save_id` committed: its marker and
/// those of the ids its ranks named their files with (`file_ids`); with
/// `seen` (files are cleaned, unless the save keeps stale ones), first,
/// after a save with collectives (`rank` `None`), the per-rank documents
/// of an earlier save without them (the new document replaces them, so
/// they count as committed no more), then [`uncommitted_files`] (the files
/// of the checkpoint replaced and of failed saves), and the temp files of
/// the save's document (`<document>.tmp-*`). With `rank` (a save without
/// collectives), only that rank's files are looked at.
pub fn after_commit_files(
    seen: Option<&SaveListing>,
    save_id: &str,
    file_ids: &[String],
    rank: Option<u64>,
    caller: &SaveCaller,
    stale_after: f64,
) -> Vec<String> {
    let mut remove = Vec::new();
    if let Some(seen) = seen {
        let mut replaced = Vec::new();
        if rank.is_none() {
            replaced = metadata_documents(seen.names.iter().map(String::as_str));
            replaced.retain(|d| *d != DCP_METADATA);
            remove.extend(replaced.iter().map(|d| d.to_string()));
        }
        remove.extend(uncommitted(seen, &replaced, save_id, rank, caller, stale_after));
        let own_doc = rank.map_or_else(|| DCP_METADATA.to_string(), rank_metadata_name);
        let temp = format!("{own_doc}.tmp-");
        remove.extend(seen.names.iter().filter(|n| n.starts_with(&temp)).cloned());
    }
    let ids: BTreeSet<&str> = file_ids.iter().map(String::as_str).chain([save_id]).collect();
    for marker in ids.into_iter().map(save_marker_name) {
        if !remove.contains(&marker) {
            remove.push(marker);
        }
    }
    remove
}

#[cfg(test)]
mod tests;
