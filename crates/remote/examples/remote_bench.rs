//! The remote benchmark (`cargo xtask bench --remote`): a checkpoint served
//! by nginx on loopback, read with `deathtensors-remote` and downloaded with
//! `curl` in the same run, side by side. Prints requests, bytes and
//! throughput as a Markdown table for `docs/BENCHMARKS.md`.
//!
//! `remote_bench [--size-mib N] [--tensor-mib N] [--runs N] [--ranks N]`

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deathtensors_io::format::{Dtype, TensorSpec};
use deathtensors_io::{save, ReadOptions, WriteOptions};
use deathtensors_remote::{open, prefetch, RemoteOptions};

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx(dir: &Path, root: &Path) -> Result<(Nginx, u16), String> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or("nginx is not installed (cargo xtask setup installs it)")?;
    let port =
        TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?.local_addr().map_err(|e| e.to_string())?.port();
    let d = dir.display();
    std::fs::create_dir_all(dir.join("tmp")).map_err(|e| e.to_string())?;
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 100000;\n\
         client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp; uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
         server {{ listen 127.0.0.1:{port}; root {}; location / {{ }} }} }}\n",
        root.display()
    );
    std::fs::write(dir.join("nginx.conf"), conf).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let server = Nginx(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(20) {
            return Err("nginx did not start".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((server, port))
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A checkpoint of `count` F32 tensors of `len` bytes, with digests and a footer.
fn write(path: &Path, count: usize, len: usize, checksum: bool) -> Result<(), String> {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let names: Vec<String> = (0..count).map(|i| format!("model.layers.{i}.weight")).collect();
    let specs: Vec<(TensorSpec, &[u8])> =
        names.iter().map(|n| (TensorSpec::new(n.as_str(), Dtype::F32, [len as u64 / 4]), &data[..])).collect();
    let options = WriteOptions { checksum, durable: false, ..WriteOptions::default() };
    save(path, specs, &options).map_err(|e| e.to_string())?;
    Ok(())
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = arg(&args, "--size-mib", 1024) << 20;
    let tensor = arg(&args, "--tensor-mib", 4) << 20;
    let runs = arg(&args, "--runs", 3) as usize;
    let ranks = arg(&args, "--ranks", 8) as usize;
    let dir = std::env::temp_dir().join(format!("dt-remote-bench-{}", std::process::id()));
    let root = dir.join("www");
    std::fs::create_dir_all(&root).map_err(|e| e.to_string())?;
    let result = run(&args, &dir, &root, size, tensor, runs, ranks);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The options of every read: the defaults, or `--part-mib` and `--concurrency`.
fn read_options(args: &[String]) -> RemoteOptions {
    let d = RemoteOptions::default();
    RemoteOptions {
        part_size: arg(args, "--part-mib", d.part_size >> 20) << 20,
        concurrency: arg(args, "--concurrency", d.concurrency as u64) as usize,
        ..d
    }
}

fn run(
    args: &[String],
    dir: &Path,
    root: &Path,
    size: u64,
    tensor: u64,
    runs: usize,
    ranks: usize,
) -> Result<(), String> {
    let count = (size / tensor) as usize;
    write(&root.join("model.dt"), count, tensor as usize, true)?;
    // A large head: 40,000 small tensors (a ~7 MiB header).
    write(&root.join("wide.dt"), 40_000, 64, true)?;
    let (_server, port) = nginx(dir, root)?;
    let url = |n: &str| format!("http://127.0.0.1:{port}/{n}");
    let file_len = std::fs::metadata(root.join("model.dt")).map_err(|e| e.to_string())?.len();
    println!(
        "file: {} MiB, {count} tensors of {} MiB, nginx on loopback, {runs} runs each\n",
        file_len >> 20,
        tensor >> 20
    );

    // curl: the best single download of the same file.
    let mut curl_best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        let ok = Command::new("curl")
            .args(["-s", "-o", "/dev/null", &url("model.dt")])
            .status()
            .map_err(|e| format!("curl: {e}"))?
            .success();
        if !ok {
            return Err("curl failed".into());
        }
        curl_best = curl_best.min(t.elapsed());
    }

    // curl piped into OpenSSL's SHA-256 (which uses the CPU's SHA
    // extensions, unlike coreutils' sha256sum): the fastest way a single
    // download checks its bytes, the reference for a checked load.
    let mut curl_sha_best = Duration::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        let ok = Command::new("sh")
            .args(["-c", &format!("curl -s {} | openssl dgst -sha256 > /dev/null", url("model.dt"))])
            .status()
            .map_err(|e| format!("sh: {e}"))?
            .success();
        if !ok {
            return Err("curl | openssl dgst -sha256 failed".into());
        }
        curl_sha_best = curl_sha_best.min(t.elapsed());
    }

    println!("| what | requests | bytes transferred | goal | time |");
    println!("|---|---|---|---|---|");
    for name in ["model.dt", "wide.dt"] {
        let options = read_options(args);
        let t = Instant::now();
        let reader = open(&url(name), &options, ReadOptions::default()).map_err(|e| e.to_string())?;
        let head = reader.head().data_start;
        println!(
            "| open {name} (head {head} B) | {} | {} | <= 2, <= head + 65,536 = {} | {:.1} ms |",
            options.stats.requests(),
            options.stats.bytes(),
            head + 65_536,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let options = read_options(args);
    let reader = open(&url("model.dt"), &options, ReadOptions::default()).map_err(|e| e.to_string())?;
    let (r0, b0) = (options.stats.requests(), options.stats.bytes());
    let name = format!("model.layers.{}.weight", count / 2);
    let t = Instant::now();
    let one = reader.read(&name).map_err(|e| e.to_string())?;
    println!(
        "| one tensor ({} B), digest checked | {} | {} | <= size + 1% | {:.1} ms |",
        one.len(),
        options.stats.requests() - r0,
        options.stats.bytes() - b0,
        t.elapsed().as_secs_f64() * 1e3
    );

    // Everything: the whole blob, parallel parts, every digest checked
    // (and, for comparison, the same file without digests).
    let len = reader.header().data_len();
    let mut buf = vec![0u8; len as usize];
    let mut best = Duration::MAX;
    for (name, what) in [("model.dt", "digests checked"), ("plain.dt", "a file without digests")] {
        if name == "plain.dt" {
            // Room on small disks: curl and the loads above are done with it.
            let _ = std::fs::remove_file(root.join("model.dt"));
            write(&root.join("plain.dt"), count, tensor as usize, false)?;
        }
        let (mut took_best, mut requests, mut bytes) = (Duration::MAX, 0, 0);
        for _ in 0..runs {
            let options = read_options(args);
            let t = Instant::now();
            let reader = open(&url(name), &options, ReadOptions::default()).map_err(|e| e.to_string())?;
            reader.read_data_into(&mut buf).map_err(|e| e.to_string())?;
            let took = t.elapsed();
            if took < took_best {
                (took_best, requests, bytes) = (took, options.stats.requests(), options.stats.bytes());
            }
        }
        if name == "model.dt" {
            best = took_best;
        }
        println!(
            "| load everything (open + all tensors), {what} | {requests} | {bytes} | >= 90% of curl | {:.0} ms: {:.2} GB/s |",
            took_best.as_secs_f64() * 1e3,
            gbps(len, took_best)
        );
    }
    println!(
        "| curl, best single download | 1 | {file_len} | | {:.0} ms: {:.2} GB/s |",
        curl_best.as_secs_f64() * 1e3,
        gbps(file_len, curl_best)
    );
    println!(
        "| curl \\| openssl dgst -sha256, best | 1 | {file_len} | | {:.0} ms: {:.2} GB/s |",
        curl_sha_best.as_secs_f64() * 1e3,
        gbps(file_len, curl_sha_best)
    );
    println!(
        "\nload everything / curl: {:.0}% (bytes per second); / curl | openssl sha256: {:.0}%\n",
        100.0 * gbps(len, best) / gbps(file_len, curl_best),
        100.0 * gbps(len, best) / gbps(file_len, curl_sha_best)
    );

    // Ranks: each opens the URL and reads its contiguous share of the
    // tensors (prefetched, coalesced), as docs/REMOTE.md describes.
    let names: Vec<String> = reader.header().tensors().iter().map(|t| t.name.clone()).collect();
    println!("| rank of {ranks} | requests | bytes transferred | its tensors' bytes |");
    println!("|---|---|---|---|");
    let (mut total_requests, mut total_bytes) = (0, 0);
    for rank in 0..ranks {
        let options = read_options(args);
        // The file without digests (model.dt made room for it): the same layout.
        let reader = open(&url("plain.dt"), &options, ReadOptions::default()).map_err(|e| e.to_string())?;
        let share: Vec<&str> = names
            .iter()
            .skip(rank * names.len() / ranks)
            .take((rank + 1) * names.len() / ranks - rank * names.len() / ranks)
            .map(String::as_str)
            .collect();
        prefetch(&reader, &share).map_err(|e| e.to_string())?;
        let mut mine = 0u64;
        for n in &share {
            mine += reader.read(n).map_err(|e| e.to_string())?.len() as u64;
        }
        total_requests += options.stats.requests();
        total_bytes += options.stats.bytes();
        if rank < 2 || rank == ranks - 1 {
            println!("| {rank} | {} | {} | {mine} |", options.stats.requests(), options.stats.bytes());
        }
    }
    println!("| all {ranks} | {total_requests} | {total_bytes} | {len} |");
    Ok(())
}
