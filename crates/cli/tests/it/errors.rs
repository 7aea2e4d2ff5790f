//! Exit codes, one-line errors, files that are not tensor files, help, and
//! closed pipes.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;

use deathtensors_io::format::Dtype;
use deathtensors_io::WriteOptions;

use crate::{assert_one_error_line, check, command, run, testdata, valid, write, Scratch};

const SUBCOMMANDS: [&str; 12] =
    ["inspect", "ls", "verify", "convert", "diff", "stats", "cat", "meta", "keygen", "encrypt", "decrypt", "sign"];

#[test]
fn usage_errors_exit_2() {
    let r = check(Vec::<&str>::new(), 2);
    // The program's name as started: `deathtensors.exe` on Windows.
    let usage = format!("Usage: deathtensors{} <COMMAND>", std::env::consts::EXE_SUFFIX);
    assert!(r.stderr.contains(&usage), "{}", r.stderr);
    check(["frobnicate"], 2);
    check(["inspect"], 2);
    check(["inspect", "--nope", "x"], 2);
    check(["cat", "f", "t", "--raw", "--json"], 2);
}

#[test]
fn help_and_version_exit_0_with_an_example_for_every_subcommand() {
    let top = check(["--help"], 0).stdout;
    assert!(top.contains("Exit codes:") && top.contains("--json"), "{top}");
    for sub in SUBCOMMANDS {
        let help = check([sub, "--help"], 0).stdout;
        assert!(help.contains("Examples:") && help.contains(&format!("deathtensors {sub} ")), "{sub}: {help}");
        assert!(top.contains(sub), "{sub}");
    }
    assert!(check(["--version"], 0).stdout.starts_with("deathtensors 0."));
}

#[test]
fn a_missing_file_exits_2_naming_it() {
    // The system's own words: Windows says "path not found" (error 3).
    let missing = if cfg!(windows) { "(os error 3)" } else { "No such file" };
    let commands: [&[&str]; 11] = [
        &["inspect"],
        &["ls"],
        &["verify"],
        &["stats"],
        &["meta"],
        &["cat", "--", "/no/such/model.dt", "weight"],
        &["convert", "--", "/no/such/model.dt", "out.dt"],
        &["diff", "--", "/no/such/model.dt", "/no/such/model.dt"],
        &["decrypt", "--", "/no/such/model.dt", "out.dt"],
        &["scan"],
        &["consolidate", "--", "/no/such/model.dt", "out.dt"],
    ];
    for args in commands {
        let args: Vec<&str> = if args.len() == 1 { vec![args[0], "/no/such/model.dt"] } else { args.to_vec() };
        let r = check(&args, 2);
        // One wording across commands: "cannot open [the input] PATH: ...".
        assert_one_error_line(&r, &["cannot open", "/no/such/model.dt", missing]);
        assert_eq!(r.stdout, "", "{args:?}");
    }
}

/// The line of `--help`'s "Exit codes:" for `code`.
fn exit_code_help(code: u8) -> String {
    let top = check(["--help"], 0).stdout;
    let codes = top.split("Exit codes:").nth(1).expect("--help lists exit codes");
    let line = codes.lines().find(|l| l.trim_start().starts_with(&format!("{code} "))).expect("a line for the code");
    line.trim().to_string()
}

#[test]
fn exit_0_means_success_and_for_diff_the_same_files() {
    assert_eq!(exit_code_help(0), "0  success (for diff: the files are the same)");
    let scratch = Scratch::new("exit-0");
    let file = scratch.path("sound.dt");
    let options = WriteOptions { checksum: true, ..WriteOptions::default() };
    write(&file, &[("w", Dtype::F32, &[4], crate::f32s(&[1.0, 2.0, 3.0, 4.0]))], &options);
    for sub in ["inspect", "ls", "verify", "stats"] {
        check([sub.as_ref(), file.as_os_str()], 0);
    }
    check(["diff".as_ref(), file.as_os_str(), file.as_os_str()], 0);
    check(["scan".as_ref(), testdata().join("torch/views.pt").as_os_str()], 0);
}

#[test]
fn exit_1_means_an_invalid_file_a_failed_check_or_for_diff_different_files() {
    assert_eq!(exit_code_help(1), "1  a file is invalid, or a check failed (for diff: the files differ)");
    let scratch = Scratch::new("exit-1");
    // An invalid file: a header length pointing past the end.
    let invalid = scratch.path("invalid.safetensors");
    std::fs::write(&invalid, [0xff, 0xff, 0, 0, 0, 0, 0, 0, b'{', b'}']).unwrap();
    for sub in ["inspect", "ls", "verify"] {
        assert_one_error_line(&check([sub.as_ref(), invalid.as_os_str()], 1), &["invalid.safetensors"]);
    }
    // A failed check: a flipped tensor byte under a footer.
    let flipped = scratch.path("flipped.dt");
    write(
        &flipped,
        &[("w", Dtype::F32, &[4], crate::f32s(&[1.0, 2.0, 3.0, 4.0]))],
        &WriteOptions { checksum: true, ..WriteOptions::default() },
    );
    let mut bytes = std::fs::read(&flipped).unwrap();
    let at = bytes.len() - 32 - 3; // inside the tensor, before the 32-byte footer
    bytes[at] ^= 1;
    std::fs::write(&flipped, bytes).unwrap();
    check(["verify".as_ref(), flipped.as_os_str()], 1);
    // Files that differ.
    let a = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let b = valid("safetensors-0.8.0/empty.safetensors");
    check(["diff".as_ref(), a.as_os_str(), b.as_os_str()], 1);
    // A pickle that would call something else than torch's constructors.
    check(["scan".as_ref(), testdata().join("torch/os-system.pt").as_os_str()], 1);
}

#[test]
fn exit_2_means_usage_or_any_other_error() {
    assert_eq!(exit_code_help(2), "2  usage or any other error (a missing file, a missing tensor, ...)");
    check(["frobnicate"], 2);
    check(["inspect", "--nope", "x"], 2);
    check(["inspect", "/no/such/model.dt"], 2);
    let file = valid("safetensors-0.8.0/all_dtypes.safetensors");
    check(["cat".as_ref(), file.as_os_str(), "nope".as_ref()], 2);
}

#[test]
fn a_directory_is_named_as_one_saying_what_it_holds() {
    let scratch = Scratch::new("directories");
    let (plain, dcp, sharded) = (scratch.path("plain"), scratch.path("step-1000"), scratch.path("hf"));
    for d in [&plain, &dcp, &sharded] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(dcp.join("deathtensors.json"), "{}").unwrap();
    std::fs::write(sharded.join("model.safetensors.index.json"), "{}").unwrap();
    for sub in ["inspect", "ls", "verify", "stats", "meta"] {
        let says = |dir: &std::path::Path, parts: &[&str]| {
            let r = run([sub.as_ref(), dir.as_os_str()]);
            assert_ne!(r.code, 0, "{sub}: {}", r.stderr);
            assert_one_error_line(&r, parts);
            assert!(!r.stderr.contains("os error"), "{sub}: {}", r.stderr);
        };
        says(&plain, &["plain", "is a directory, not a tensor file"]);
        says(
            &dcp,
            &[
                "step-1000",
                "not a tensor file: it holds a distributed checkpoint",
                "deathtensors consolidate DIR OUT",
                "StorageReader",
            ],
        );
        says(&sharded, &["it holds a sharded checkpoint, open its index", "model.safetensors.index.json"]);
    }
}

#[test]
fn every_invalid_fixture_exits_1_with_one_line_naming_the_file() {
    let dir = testdata().join("invalid");
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut seen = 0;
    for (name, entry) in manifest["files"].as_object().unwrap() {
        // Files invalid only under lower limits than the defaults are valid here.
        if entry.get("limits").is_some() {
            continue;
        }
        let path = dir.join(name);
        let r = run(["inspect".as_ref(), path.as_os_str()]);
        assert_eq!(r.code, 1, "{name}: {}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{name}: {}", r.stderr);
        assert_one_error_line(&r, &[name]);
        assert_eq!(r.stdout, "", "{name}");
        seen += 1;
    }
    assert!(seen > 200, "{seen}");
}

#[test]
fn lfs_pointers_and_html_pages_are_named_as_such() {
    for (name, says) in [
        (
            "lfs-pointer.safetensors",
            "it looks like a Git LFS pointer, not the file itself (fetch it with `git lfs pull`)",
        ),
        ("lfs-pointer.deathtensors", "Git LFS pointer"),
        ("html-page.safetensors", "it looks like an HTML page"),
    ] {
        let path = testdata().join("invalid").join(name);
        for sub in ["inspect", "verify", "stats", "ls"] {
            let r = check([sub.as_ref(), path.as_os_str()], 1);
            assert_one_error_line(&r, &[name, "not a deathtensors, safetensors or bintensors file", says]);
            // Each part of the message once.
            assert_eq!(r.stderr.matches("not a deathtensors").count(), 1, "{}", r.stderr);
        }
    }
}

#[test]
fn a_closed_pipe_exits_quietly() {
    let dir = Scratch::new("broken-pipe");
    let path = dir.path("big.dt");
    // Enough output to overflow the pipe's buffer after the reader leaves.
    let n = 1u64 << 20;
    write(&path, &[("x", Dtype::U8, &[n], vec![7; n as usize])], &WriteOptions::default());
    for args in [vec!["cat", "--full"], vec!["cat", "--raw"], vec!["cat", "--full", "--json"]] {
        let mut child =
            command().args(&args).arg(&path).arg("x").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = Vec::new();
        stdout.read_until(b'\n', &mut first).unwrap();
        assert!(!first.is_empty());
        drop(stdout);
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn a_missing_tensor_exits_2() {
    let path = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let r = check(["cat".as_ref(), path.as_os_str(), "nope".as_ref()], 2);
    assert_one_error_line(&r, &["all_dtypes.safetensors", "no tensor named \"nope\""]);
}

/// The subcommands of `help`'s "Commands:" list (and `blob`'s).
fn subcommands(args: &[&str]) -> Vec<String> {
    let help = check(args.iter().copied().chain(["--help"]), 0).stdout;
    let list = help.split("Commands:").nth(1).unwrap_or("").split("\n\n").next().unwrap_or("");
    list.lines().filter_map(|l| l.split_whitespace().next()).filter(|c| *c != "help").map(String::from).collect()
}

#[test]
fn every_option_sits_under_the_heading_it_belongs_to() {
    // Issue 61: verify, inspect, diff, encrypt, stats, cat and meta filed
    // their own options (--signer, --json, --atol ...) under "URLs:".
    let owned: [(&str, &[&str]); 2] =
        [("Keys:", &["--key", "--passphrase-env", "--policy-input"]), ("URLs:", &["--storage-option"])];
    let mut commands: Vec<Vec<String>> = subcommands(&[]).into_iter().map(|c| vec![c]).collect();
    commands.extend(subcommands(&["blob"]).into_iter().map(|c| vec!["blob".to_string(), c]));
    assert!(commands.len() > 20, "{commands:?}");
    for command in &commands {
        let help = check(command.iter().map(String::as_str).chain(["--help"]), 0).stdout;
        for section in help.split("\n\n") {
            let Some((heading, options)) = owned.iter().find(|(h, _)| section.starts_with(h)) else {
                continue;
            };
            for line in section.lines().skip(1) {
                let Some(flag) = line.split_whitespace().find(|w| w.starts_with("--")) else { continue };
                assert!(
                    options.contains(&flag),
                    "deathtensors {}: {flag} is under {heading}\n{help}",
                    command.join(" ")
                );
            }
        }
    }
}

#[test]
fn one_word_one_meaning_and_old_spellings_still_work_with_a_note() {
    // Issue 61: --to was a recipient in encrypt and an output format in
    // convert, decrypt, blob export and consolidate.
    let scratch = Scratch::new("old-spellings");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let out = scratch.path("m.bt");
    let r =
        check(["convert".as_ref(), src.as_os_str(), out.as_os_str(), "--format".as_ref(), "safetensors".as_ref()], 0);
    assert!(!r.stderr.contains("old spelling"), "{}", r.stderr);
    let r = check(["convert".as_ref(), src.as_os_str(), out.as_os_str(), "--to".as_ref(), "safetensors".as_ref()], 0);
    assert!(r.stderr.contains("note: --to is an old spelling: use --format for the output format"), "{}", r.stderr);
    let key = scratch.path("team.jwk");
    check(["keygen".as_ref(), "--type".as_ref(), "symmetric".as_ref(), "--out".as_ref(), key.as_os_str()], 0);
    let enc = scratch.path("e.dt");
    let r = check(["encrypt".as_ref(), src.as_os_str(), enc.as_os_str(), "--recipient".as_ref(), key.as_os_str()], 0);
    assert!(!r.stderr.contains("old spelling"), "{}", r.stderr);
    let r = check(["encrypt".as_ref(), src.as_os_str(), enc.as_os_str(), "--to".as_ref(), key.as_os_str()], 0);
    assert!(
        r.stderr.contains("note: --to is an old spelling: use --recipient for encrypt's recipients"),
        "{}",
        r.stderr
    );
    for sub in ["convert", "decrypt", "consolidate"] {
        let help = check([sub, "--help"], 0).stdout;
        assert!(help.contains("--format <") && !help.contains("--to <"), "{sub}: {help}");
    }
    let help = check(["encrypt", "--help"], 0).stdout;
    assert!(help.contains("--recipient <FILE>") && !help.contains("--to <"), "{help}");
}

#[test]
fn a_missing_file_has_one_wording_and_a_json_that_is_no_index_is_an_invalid_file() {
    // Issue 61: convert said "cannot read X (the input): no such file or
    // directory" where every other command says "cannot open X: ..."; a
    // JSON file that is not an index exited 2, where 1 means an invalid file.
    let missing = if cfg!(windows) { "(os error 3)" } else { "No such file" };
    let r = check(["convert", "/no/such/model.dt", "out.dt"], 2);
    assert_one_error_line(&r, &["cannot open the input /no/such/model.dt: ", missing]);
    let r = check(["inspect", "/no/such/model.dt"], 2);
    assert_one_error_line(&r, &["cannot open /no/such/model.dt: ", missing]);
    let scratch = Scratch::new("not-an-index");
    let json = scratch.path("config.json");
    std::fs::write(&json, b"{\"hidden_size\": 8}").unwrap();
    for sub in ["inspect", "ls", "verify"] {
        let r = check([sub.as_ref(), json.as_os_str()], 1);
        assert_one_error_line(&r, &["config.json", "index has no \"weight_map\" object"]);
    }
}
