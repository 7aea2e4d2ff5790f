use super::*;

const OWN: &str = "00000000000000aa";
const OTHER: &str = "00000000000000bb";
const NOW: f64 = 100_000.0;

/// This process on host `here`, asking from thread 1, threads 1 and 2 alive.
fn caller() -> SaveCaller {
    SaveCaller {
        host: "here".into(),
        pid: u64::from(std::process::id()),
        thread: 1,
        live_threads: [1, 2].into(),
        now: NOW,
    }
}

/// A marker's document: `started` seconds before now, on `host`, by
/// process `pid`'s thread `thread`.
fn marker(host: &str, pid: u64, thread: u64, age: f64, rank: Option<u64>) -> Vec<u8> {
    SaveMarker { save_id: OTHER.into(), host: host.into(), pid, thread, started: NOW - age, rank }.encode()
}

fn this_process(thread: u64) -> Vec<u8> {
    marker("here", caller().pid, thread, 0.0, None)
}

fn remote(age: f64) -> Vec<u8> {
    marker("elsewhere", 1, 1, age, None)
}

fn rank_file(rank: u64, id: &str) -> String {
    deathtensors_format::rank_file_name(rank, id, "dt")
}

/// The committed document naming `files`.
fn document(files: &[&str]) -> Option<Vec<u8>> {
    let files: Map<String, Value> = files.iter().map(|f| (f.to_string(), serde_json::json!({"rank": 0}))).collect();
    Some(serde_json::json!({"save_id": OWN, "files": files}).to_string().into_bytes())
}

/// A store holding `names`, the markers of `markers` (by save id), and
/// the documents `documents`; each marker and each document also listed.
fn listing(names: &[&str], markers: &[(&str, Option<Vec<u8>>)], documents: &[(&str, Option<Vec<u8>>)]) -> SaveListing {
    let mut seen = SaveListing::default();
    seen.names.extend(names.iter().map(|n| n.to_string()));
    for (id, data) in markers {
        seen.names.insert(save_marker_name(id));
        seen.markers.insert(id.to_string(), data.clone());
    }
    for (name, data) in documents {
        seen.names.insert(name.to_string());
        seen.documents.insert(name.to_string(), data.clone());
    }
    seen
}

#[track_caller]
fn check_before(seen: &SaveListing, rank: Option<u64>, expected: &[&str]) {
    let mut got = uncommitted_files(seen, OWN, rank, &caller(), DEFAULT_STALE_AFTER);
    got.sort();
    let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(got, expected);
}

/// The names removed before the ranks write, with one other save's rank
/// files and its marker `data` (`None`: no marker); the committed
/// checkpoint names rank 0's file of save `...cc`.
#[track_caller]
fn check_other_save(data: Option<Option<Vec<u8>>>, removed: bool) {
    let committed = rank_file(0, "00000000000000cc");
    let files = [rank_file(0, OTHER), rank_file(1, OTHER)];
    let markers: Vec<(&str, Option<Vec<u8>>)> = data.clone().map(|d| (OTHER, d)).into_iter().collect();
    let seen = listing(&[&committed, &files[0], &files[1]], &markers, &[(DCP_METADATA, document(&[&committed]))]);
    let mut expected: Vec<&str> = Vec::new();
    let marker = save_marker_name(OTHER);
    if removed {
        expected.extend(files.iter().map(String::as_str));
        if data.is_some() {
            expected.push(&marker);
        }
    }
    check_before(&seen, None, &expected);
}

#[test]
fn a_marker_parses_back_and_a_garbled_one_does_not() {
    let m = SaveMarker::new(OWN, &caller(), Some(3));
    assert_eq!(SaveMarker::parse(OWN, &m.encode()), Some(m.clone()));
    let m = SaveMarker { rank: None, ..m };
    assert_eq!(SaveMarker::parse(OWN, &m.encode()), Some(m));
    let parsed = SaveMarker::parse(OWN, br#"{"host":"h","pid":5,"thread":6,"started":7,"rank":"1"}"#).unwrap();
    assert_eq!((parsed.pid, parsed.rank), (5, None));
    for garbled in [
        &b"not json"[..],
        br#""not a marker""#,
        br#"[1]"#,
        br#"{"pid":5,"thread":6,"started":7}"#,
        br#"{"host":1,"pid":5,"thread":6,"started":7}"#,
        br#"{"host":"h","pid":"5","thread":6,"started":7}"#,
        br#"{"host":"h","pid":5,"thread":-6,"started":7}"#,
        br#"{"host":"h","pid":5,"thread":6,"started":"7"}"#,
    ] {
        assert_eq!(SaveMarker::parse(OWN, garbled), None, "{}", String::from_utf8_lossy(garbled));
    }
}

#[test]
fn a_marker_of_another_host_runs_for_stale_after_seconds() {
    let parse = |data: Vec<u8>| SaveMarker::parse(OTHER, &data).unwrap();
    assert!(parse(remote(60.0)).may_run(&caller(), DEFAULT_STALE_AFTER));
    assert!(!parse(remote(7200.0)).may_run(&caller(), DEFAULT_STALE_AFTER));
    assert!(!parse(remote(60.0)).may_run(&caller(), 30.0));
    // Its process id and thread are another host's: not looked at.
    assert!(parse(marker("elsewhere", caller().pid, 2, 0.0, None)).may_run(&caller(), DEFAULT_STALE_AFTER));
}

#[test]
fn a_marker_of_this_process_runs_while_its_thread_lives_and_is_not_the_callers() {
    let parse = |data: Vec<u8>| SaveMarker::parse(OTHER, &data).unwrap();
    assert!(parse(this_process(2)).may_run(&caller(), DEFAULT_STALE_AFTER));
    assert!(!parse(this_process(1)).may_run(&caller(), DEFAULT_STALE_AFTER), "the caller's own thread");
    assert!(!parse(this_process(3)).may_run(&caller(), DEFAULT_STALE_AFTER), "a thread that ended");
    // However old: this host can tell.
    assert!(parse(marker("here", caller().pid, 2, 1e9, None)).may_run(&caller(), DEFAULT_STALE_AFTER));
}

#[cfg(unix)]
#[test]
fn a_marker_of_another_process_of_this_host_runs_while_it_lives() {
    let parse = |pid: u64| SaveMarker::parse(OTHER, &marker("here", pid, 1, 1e9, None)).unwrap();
    let parent = u64::from(std::os::unix::process::parent_id());
    assert!(parse(parent).may_run(&caller(), DEFAULT_STALE_AFTER));
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = u64::from(child.id());
    child.wait().unwrap();
    assert!(!parse(dead).may_run(&caller(), DEFAULT_STALE_AFTER));
    // A process id no process can have: unsure, so it may run.
    assert!(parse(u64::MAX).may_run(&caller(), DEFAULT_STALE_AFTER));
}

#[test]
fn before_a_save_the_files_of_saves_that_no_longer_run_go() {
    check_other_save(None, true);
    check_other_save(Some(None), true); // the marker went since the listing
    check_other_save(Some(Some(b"not a marker".to_vec())), true);
    check_other_save(Some(Some(remote(7200.0))), true);
    check_other_save(Some(Some(this_process(1))), true);
    check_other_save(Some(Some(this_process(3))), true);
}

#[test]
fn before_a_save_the_files_of_saves_that_may_run_stay() {
    check_other_save(Some(Some(remote(60.0))), false);
    check_other_save(Some(Some(this_process(2))), false);
    #[cfg(unix)]
    check_other_save(Some(Some(marker("here", u64::from(std::os::unix::process::parent_id()), 1, 0.0, None))), false);
}

#[test]
fn before_a_save_its_own_files_and_committed_ones_stay() {
    let (own, committed, stray) = (rank_file(0, OWN), rank_file(1, OTHER), rank_file(2, OTHER));
    let seen = listing(
        &[&own, &committed, &stray, "unrelated.txt"],
        &[(OWN, Some(this_process(1)))],
        &[(DCP_METADATA, document(&[&committed]))],
    );
    check_before(&seen, None, &[&stray]);
    // Its id counts only with its marker seen, as before.
    let seen = listing(&[&own], &[], &[]);
    check_before(&seen, None, &[&own]);
}

#[test]
fn before_a_save_an_unreadable_document_keeps_everything() {
    let stray = rank_file(1, OTHER);
    for bad in [&b"{not json"[..], br#"{"files":[]}"#, br#"[1]"#, br#"{"no_files":{}}"#] {
        let seen = listing(&[&stray], &[], &[(DCP_METADATA, Some(bad.to_vec()))]);
        check_before(&seen, None, &[]);
    }
    // A document gone since the listing names nothing.
    let seen = listing(&[&stray], &[], &[(DCP_METADATA, None)]);
    check_before(&seen, None, &[&stray]);
    // Every document counts, a rank's too.
    let seen = listing(&[&stray], &[], &[(DCP_METADATA, document(&[])), (&rank_metadata_name(1), document(&[&stray]))]);
    check_before(&seen, None, &[]);
}

#[test]
fn before_a_rank_saves_alone_it_looks_only_at_its_own_files_and_markers() {
    let (mine, theirs) = (rank_file(1, OTHER), rank_file(2, OTHER));
    let third = "00000000000000dd";
    let third_file = rank_file(2, third);
    let seen = listing(
        &[&mine, &theirs, &third_file],
        &[(OTHER, Some(marker("elsewhere", 1, 1, 7200.0, Some(1)))), (third, Some(marker("gone", 1, 1, 1e9, Some(2))))],
        &[],
    );
    check_before(&seen, Some(1), &[&mine, &save_marker_name(OTHER)]);
    check_before(&seen, Some(2), &[&theirs, &third_file, &save_marker_name(third)]);
    // A marker naming no rank is no rank's: with a rank, its files go
    // unless another rule keeps them, and it stays.
    let seen = listing(&[&mine], &[(OTHER, Some(remote(60.0)))], &[]);
    check_before(&seen, Some(1), &[&mine]);
    check_before(&seen, None, &[]);
    // A marker whose rank is readable but whose rest is not: that rank's,
    // and not running.
    let seen = listing(&[&mine], &[(OTHER, Some(br#"{"rank":1}"#.to_vec()))], &[]);
    check_before(&seen, Some(1), &[&mine, &save_marker_name(OTHER)]);
}

#[test]
fn after_a_commit_its_markers_go_and_with_cleaning_the_replaced_files_too() {
    let (new, old) = (rank_file(0, OWN), rank_file(0, OTHER));
    let cached = "00000000000000ee";
    let cached_file = rank_file(1, cached);
    let rank_doc = rank_metadata_name(0);
    let seen = listing(
        &[&new, &old, &cached_file, "deathtensors.json.tmp-1", "deathtensors.rank-00000.json.tmp-1"],
        &[(OWN, Some(this_process(1))), (cached, Some(marker("here", caller().pid, 1, 0.0, Some(1))))],
        &[(DCP_METADATA, document(&[&new, &cached_file])), (&rank_doc, document(&[&old]))],
    );
    let markers = [cached.to_string()];
    let after = |seen, rank| after_commit_files(seen, OWN, &markers, rank, &caller(), DEFAULT_STALE_AFTER);
    // The rank's document goes first (the new one replaces it), then the
    // files it named, the temp files, the markers last.
    assert_eq!(
        after(Some(&seen), None),
        [&rank_doc, &old, &save_marker_name(cached), "deathtensors.json.tmp-1", &save_marker_name(OWN)]
    );
    // keep_stale: the markers only.
    assert_eq!(after(None, None), [save_marker_name(OWN), save_marker_name(cached)]);
    // A rank's own save: its documents stay, and so do the files any names.
    assert_eq!(
        after(Some(&seen), Some(0)),
        ["deathtensors.rank-00000.json.tmp-1".to_string(), save_marker_name(OWN), save_marker_name(cached)]
    );
}

#[test]
fn after_a_commit_an_unreadable_document_keeps_every_file() {
    let old = rank_file(0, OTHER);
    let seen = listing(&[&old, "deathtensors.json.tmp-1"], &[], &[(DCP_METADATA, Some(b"{not json".to_vec()))]);
    let got = after_commit_files(Some(&seen), OWN, &[], None, &caller(), DEFAULT_STALE_AFTER);
    assert_eq!(got, ["deathtensors.json.tmp-1".to_string(), save_marker_name(OWN)]);
}

#[test]
fn the_metadata_documents_are_the_checkpoints_and_the_ranks_sorted() {
    let names = ["rank-00000-00000000000000aa.dt", "deathtensors.rank-00001.json", DCP_METADATA, "x.json"];
    assert_eq!(metadata_documents(names), ["deathtensors.json", "deathtensors.rank-00001.json"]);
}
