//! URLs in place of paths: each reading command on a file served by nginx
//! on loopback (started and stopped here; skipped with a message when nginx
//! is not installed), its output the same as for the local file; a URL
//! is fetched once by each command (requests counted in nginx's access log).

use std::path::Path;

use crate::{assert_one_error_line, check, json, valid, Scratch};

/// `--storage-option` arguments reaching moto's S3 server `server` (its
/// fixed test credentials).
pub(crate) fn moto_options(server: &crate::servers::Server) -> Vec<String> {
    let pairs = [
        format!("aws_endpoint=http://127.0.0.1:{}", server.port),
        "aws_access_key_id=testing".into(),
        "aws_secret_access_key=testing".into(),
        "aws_region=us-east-1".into(),
    ];
    pairs.into_iter().flat_map(|p| ["--storage-option".to_string(), p]).collect()
}

/// nginx serving `dir/www` on loopback, logging requests to
/// `dir/access.log` (`servers.rs`, shared with the remote crate's tests).
pub(crate) fn nginx(dir: &Path) -> Option<crate::servers::Server> {
    if cfg!(windows) {
        // A platform's exclusion, not a missing tool (docs/PLATFORMS.md):
        // under Wine the Linux nginx would start with its config in Windows
        // paths. The s3:// parts of these tests still run there.
        eprintln!("note: http:// parts not run on Windows: nginx is a Linux server (docs/PLATFORMS.md)");
        return None;
    }
    crate::servers::nginx_logging(dir)
}

#[test]
fn reading_commands_take_urls() {
    let dir = Scratch::new("remote");
    std::fs::create_dir_all(dir.path("www/sharded")).unwrap();
    let file = "all_dtypes.safetensors";
    std::fs::copy(valid(&format!("safetensors-0.8.0/{file}")), dir.path(&format!("www/{file}"))).unwrap();
    for e in std::fs::read_dir(valid("safetensors-0.8.0/sharded")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path("www/sharded").join(e.file_name())).unwrap();
    }
    let Some(server) = nginx(&dir.0) else { return };
    let url = format!("http://127.0.0.1:{}/{file}", server.port);
    let local = dir.path(&format!("www/{file}"));
    for cmd in ["inspect", "ls", "stats"] {
        let mut remote = json([cmd, url.as_str()], 0);
        let mut here = json([cmd, local.to_str().unwrap()], 0);
        for v in [&mut remote, &mut here] {
            if let Some(o) = v.as_object_mut() {
                o.remove("path");
                o.remove("file");
            }
        }
        assert_eq!(remote, here, "{cmd}");
    }
    check(["diff", url.as_str(), local.to_str().unwrap()], 0);
    check(["cat", url.as_str(), "u64"], 0);
    check(["verify", "--allow-missing", url.as_str()], 0);
    let out = dir.path("out.dt");
    check(["convert", "--checksum", url.as_str(), out.to_str().unwrap()], 0);
    check(["verify", out.to_str().unwrap()], 0);
    let index = format!("http://127.0.0.1:{}/sharded/model.safetensors.index.json", server.port);
    check(["verify", "--allow-missing", index.as_str()], 0);
    let r = check(["ls", &format!("http://127.0.0.1:{}/none.dt", server.port)], 2);
    assert_one_error_line(&r, &["none.dt", "no such object"]);
}

/// The requests nginx logged for paths ending in `name` since `from` lines.
fn requests(dir: &Scratch, name: &str, from: usize) -> usize {
    let log = std::fs::read_to_string(dir.path("access.log")).unwrap_or_default();
    log.lines().skip(from).filter(|l| l.contains(&format!("/{name} "))).count()
}

fn log_lines(dir: &Scratch) -> usize {
    std::fs::read_to_string(dir.path("access.log")).unwrap_or_default().lines().count()
}

#[test]
fn a_deathtensors_0_3_0_index_url_is_fetched_once() {
    // https://github.com/death-legion/deathtensors/issues/30: the check
    // "is it a sharded index?" and the command's own open of the index
    // were two opens of the URL.
    let dir = Scratch::new("remote-legacy-index");
    std::fs::create_dir_all(dir.path("www")).unwrap();
    let samples = valid("deathtensors-0.3.0/sdist-samples");
    for e in std::fs::read_dir(&samples).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("sharded_model") {
            std::fs::copy(e.path(), dir.path("www").join(e.file_name())).unwrap();
        }
    }
    let index = "sharded_model.deathtensors";
    // Its head fits the first ranged GET (64 KiB): one open, one request.
    assert!(std::fs::metadata(samples.join(index)).unwrap().len() < 64 << 10);
    let Some(server) = nginx(&dir.0) else { return };
    let url = format!("http://127.0.0.1:{}/{index}", server.port);
    let out = dir.path("merged.dt");
    let local = json(["inspect", samples.join(index).to_str().unwrap()], 0);
    let commands: [&[&str]; 4] = [
        &["inspect", &url],
        &["verify", "--allow-missing", &url],
        &["convert", &url, out.to_str().unwrap()],
        // With requirements the index (never signed) is refused, then read plain.
        &["verify", "--require-signature", &url],
    ];
    for args in commands {
        let from = log_lines(&dir);
        let code = if args.contains(&"--require-signature") { 1 } else { 0 };
        check(args, code);
        assert_eq!(requests(&dir, index, from), 1 + usize::from(code == 1), "{}", args.join(" "));
        // Every shard is read (verify, convert) or listed (inspect) through the index.
        assert!(requests(&dir, "sharded_model-00001-of-0020.deathtensors", from) >= 1, "{}", args.join(" "));
    }
    let remote = json(["inspect", &url], 0);
    assert_eq!(remote["tensors"], local["tensors"]);
    assert_eq!(remote["shards"].as_array().unwrap().len(), 20);
    check(["verify", out.to_str().unwrap(), "--allow-missing"], 0);
}

/// The bytes nginx sent for requests whose line names `name`, from its
/// access log (combined format: the body's size follows the status).
fn bytes_served(log: &Path, name: &str) -> u64 {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains(name))
        .map(|l| {
            let after = l.split('"').nth(2).unwrap_or("");
            after.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0)
        })
        .sum()
}

#[test]
fn verify_of_a_url_fetches_the_file_once() {
    use deathtensors_io::format::{Dtype, TensorSpec};
    use deathtensors_io::{save, WriteOptions};
    let dir = Scratch::new("remote-verify-once");
    std::fs::create_dir_all(dir.path("www")).unwrap();
    // 8 MiB in 8 tensors, a footer over the file and a digest each: the
    // footer's pass and the digests' pass are one pass over the bytes.
    let data: Vec<u8> = (0..1u32 << 20).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
    let specs: Vec<_> = (0..8).map(|i| TensorSpec::new(format!("t{i}"), Dtype::U8, [data.len() as u64 / 8])).collect();
    let chunks = data.chunks(data.len() / 8);
    let options = WriteOptions { checksum: true, ..WriteOptions::default() };
    let file = dir.path("www/model.dt");
    save(&file, specs.into_iter().zip(chunks).collect(), &options).unwrap();
    let len = std::fs::metadata(&file).unwrap().len();
    let Some(server) = nginx(&dir.0) else { return };
    let url = format!("http://127.0.0.1:{}/model.dt", server.port);
    let report = json(["verify", url.as_str()], 0);
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["checked"]["footer"], "ok", "{report}");
    assert_eq!(report["checked"]["tensors_verified"], 8, "{report}");
    let served = bytes_served(&dir.path("access.log"), "/model.dt");
    // Once: the file's bytes, and at most the head read twice (the probe
    // before the header's length is known), never the data twice.
    assert!(served >= len && served <= len + 256 * 1024, "{served} bytes served for a file of {len}");
}
