//! The remote benchmark (`cargo xtask bench --remote`): a checkpoint served
//! by nginx on loopback, read with `deathtensors-remote` and downloaded with
//! `curl` in the same run, side by side. Prints requests, bytes and
//! throughput as a Markdown table for `docs/BENCHMARKS.md`.
//!
//! It also prints the CPU time (user + system) that nginx and each client
//! used, from `/proc`: on a machine whose cores the server shares with the
//! client, the work of a checked download (the transfer plus SHA-256 of
//! every byte) spread over all cores bounds the throughput any checked
//! load can reach there.
//!
//! `remote_bench [--size-mib N] [--tensor-mib N] [--runs N] [--ranks N]`

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use deathtensors_io::format::{Dtype, TensorSpec};
use deathtensors_io::{save, ReadOptions, WriteOptions};
use deathtensors_remote::{open, prefetch, RemoteOptions};
use deathtensors_testkit::servers;

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

/// One timed download or load: its wall time, and the CPU time (user +
/// system) the server and the client used during it.
struct Run {
    wall: Duration,
    server_cpu: f64,
    client_cpu: f64,
}

/// CPU seconds (user + system) process `pid` has used so far, from
/// `/proc/PID/stat` (0 where there is no `/proc`).
fn cpu_seconds(pid: u32) -> f64 {
    // Fields after the command name's `)`: state is the first, utime and
    // stime the 12th and 13th, in clock ticks of 1/100 s (USER_HZ).
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| {
        let fields: Vec<u64> =
            stat.rsplit_once(')')?.1.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
        Some(fields.iter().sum::<u64>())
    });
    ticks.unwrap_or(0) as f64 / 100.0
}

/// The children's CPU seconds from the output of the shell's `times`
/// (its second line: `0m0.030000s 0m0.210000s`, user and system).
fn children_cpu(out: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(out);
    let seconds = |t: &str| -> Option<f64> {
        let (m, s) = t.trim_end_matches('s').split_once('m')?;
        Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
    };
    text.lines().nth(1).map_or(0.0, |line| line.split_whitespace().filter_map(seconds).sum())
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
    // nginx serving `dir/www` (`root`), started as the tests start it.
    let server = servers::nginx(dir).ok_or("nginx is not installed (cargo xtask setup installs it)")?;
    let url = |n: &str| server.url(n);
    let file_len = std::fs::metadata(root.join("model.dt")).map_err(|e| e.to_string())?.len();
    println!(
        "file: {} MiB, {count} tensors of {} MiB, nginx on loopback, {runs} runs each\n",
        file_len >> 20,
        tensor >> 20
    );

    let nginx_pid = server.pid();
    // curl: the best single download of the same file.
    let curl = |pipeline: &str| -> Result<Run, String> {
        let nginx0 = cpu_seconds(nginx_pid);
        let t = Instant::now();
        let out = Command::new("sh")
            .args(["-c", &format!("{pipeline} && times")])
            .output()
            .map_err(|e| format!("sh: {e}"))?;
        let wall = t.elapsed();
        if !out.status.success() {
            return Err(format!("{pipeline} failed"));
        }
        Ok(Run { wall, server_cpu: cpu_seconds(nginx_pid) - nginx0, client_cpu: children_cpu(&out.stdout) })
    };
    let best = |pipeline: &str| -> Result<Run, String> {
        let mut best: Option<Run> = None;
        for _ in 0..runs {
            let run = curl(pipeline)?;
            if best.as_ref().is_none_or(|b| run.wall < b.wall) {
                best = Some(run);
            }
        }
        best.ok_or_else(|| "no run".to_string())
    };
    let curl_run = best(&format!("curl -s -o /dev/null {}", url("model.dt")))?;
    let curl_best = curl_run.wall;
    // curl piped into OpenSSL's SHA-256 (which uses the CPU's SHA
    // extensions, unlike coreutils' sha256sum): the fastest way a single
    // download checks its bytes, the reference for a checked load.
    let curl_sha_run = best(&format!("curl -s {} | openssl dgst -sha256 > /dev/null", url("model.dt")))?;
    let curl_sha_best = curl_sha_run.wall;

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
    let mut loads = Vec::new();
    for (name, what) in [("model.dt", "digests checked"), ("plain.dt", "a file without digests")] {
        if name == "plain.dt" {
            // Room on small disks: curl and the loads above are done with it.
            let _ = std::fs::remove_file(root.join("model.dt"));
            write(&root.join("plain.dt"), count, tensor as usize, false)?;
        }
        let (mut took_best, mut requests, mut bytes) = (Duration::MAX, 0, 0);
        let mut cpu = (0.0, 0.0);
        for _ in 0..runs {
            let options = read_options(args);
            let (nginx0, self0) = (cpu_seconds(nginx_pid), cpu_seconds(std::process::id()));
            let t = Instant::now();
            let reader = open(&url(name), &options, ReadOptions::default()).map_err(|e| e.to_string())?;
            reader.read_data_into(&mut buf).map_err(|e| e.to_string())?;
            let took = t.elapsed();
            if took < took_best {
                (took_best, requests, bytes) = (took, options.stats.requests(), options.stats.bytes());
                cpu = (cpu_seconds(nginx_pid) - nginx0, cpu_seconds(std::process::id()) - self0);
            }
        }
        loads.push((what, Run { wall: took_best, server_cpu: cpu.0, client_cpu: cpu.1 }));
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

    // Where the CPU went: the bound a checked load meets on this machine.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("| CPU, best run | wall | nginx CPU | client CPU | cores busy (of {cores}) |");
    println!("|---|---|---|---|---|");
    let mut rows = vec![("curl", &curl_run), ("curl | openssl dgst -sha256", &curl_sha_run)];
    rows.extend(loads.iter().map(|(what, run)| (*what, run)));
    for (what, run) in rows {
        println!(
            "| {} | {:.0} ms | {:.2} s | {:.2} s | {:.2} |",
            what.replace('|', "\\|"),
            run.wall.as_secs_f64() * 1e3,
            run.server_cpu,
            run.client_cpu,
            (run.server_cpu + run.client_cpu) / run.wall.as_secs_f64()
        );
    }
    // A checked download's least work: curl's transfer (nginx and curl),
    // plus hashing every tensor in memory the way we do (two SHA-256
    // streams per core, on all cores), timed here on the loaded bytes.
    let slices: Vec<&[u8]> =
        reader.header().tensors().iter().map(|t| &buf[t.data_offsets.0 as usize..t.data_offsets.1 as usize]).collect();
    let before = cpu_seconds(std::process::id());
    let digests = deathtensors_io::sha256_many(&slices);
    let hashing = cpu_seconds(std::process::id()) - before;
    let checked =
        reader.header().tensors().iter().zip(&digests).all(|(t, d)| t.sha256.as_deref().is_none_or(|s| s == d));
    if !checked {
        return Err("the loaded bytes do not match their digests".into());
    }
    let work = curl_run.server_cpu + curl_run.client_cpu + hashing;
    let floor = work / cores as f64;
    println!(
        "\nA checked download does at least {work:.2} s of CPU work here: curl's transfer ({:.2} s for nginx and \
         curl) and SHA-256 of every byte in memory ({hashing:.2} s). On {cores} cores shared with \
         the server, no checked load takes less than {:.0} ms: {:.0}% of curl at best.\n",
        curl_run.server_cpu + curl_run.client_cpu,
        floor * 1e3,
        100.0 * curl_best.as_secs_f64() / floor
    );

    // Ranks: each opens the URL and reads its contiguous share of the
    // tensors (prefetched, coalesced), as docs/REMOTE.md describes.
    let names: Vec<String> = reader.header().tensors().iter().map(|t| t.name.to_string()).collect();
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
