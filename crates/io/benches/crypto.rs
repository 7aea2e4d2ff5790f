//! Encrypted and signed files (`docs/FORMAT.md` sections 10-11) on the
//! model of the `io` bench (~1 GiB, 267 tensors), in one criterion group so
//! that every row comes from the same run on the same data: the one-core
//! AEAD speed of ring (the physical limit per core), loads of a whole
//! encrypted file (from the page cache, and from the disk with the file's
//! pages dropped before each load) and of one tensor, a copy of as many
//! bytes on all cores
//! (the memory's limit for any load), and encrypted + signed saves next to
//! plain saves with a checksum.
//!
//! `cargo bench -p deathtensors-io --bench crypto` (or `cargo xtask bench`).
//! Set `DT_BENCH_MIB` to change the model size (default 1024).
//!
//! Before measuring, it runs each operation once more, untimed, and prints
//! what it read and wrote (`rchar`/`wchar` of `/proc/self/io`: bytes through
//! read and write system calls, page cache or not) and the peak RSS it added
//! (`VmHWM` after resetting it through `/proc/self/clear_refs`).

mod common;

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bench_dir, clean_writes, model, model_mib, ours, Model};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use deathtensors_format::Cipher;
use deathtensors_io::{
    save, EncryptOptions, KeyRing, ReadOptions, Reader, RecipientKey, SigningKey, SymmetricKey, WriteOptions,
};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};

/// The writer's default chunk size (`EncryptOptions::new`), used by the
/// one-core baselines too.
const CHUNK: usize = 1 << 20;

/// The tensor of the one-tensor rows: an MLP matrix, `4d × d` BF16 (about
/// 8 MiB in the 1 GiB model), in the middle of the file.
const ONE: &str = "model.layers.12.mlp.up_proj.weight";

/// One core sealing or opening `buf` in `CHUNK`-byte chunks with ring, the
/// way files are (a nonce and ~100 bytes of associated data per chunk).
struct Aead {
    key: LessSafeKey,
    tags: Vec<Tag>,
}

impl Aead {
    fn new(alg: &'static ring::aead::Algorithm) -> Aead {
        Aead { key: LessSafeKey::new(UnboundKey::new(alg, &[0x42; 32]).unwrap()), tags: Vec::new() }
    }

    fn nonce(j: usize) -> Nonce {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&(j as u64).to_le_bytes());
        Nonce::assume_unique_for_key(n)
    }

    fn seal(&mut self, buf: &mut [u8]) {
        let aad = [0x61u8; 100];
        self.tags = buf
            .chunks_mut(CHUNK)
            .enumerate()
            .map(|(j, c)| self.key.seal_in_place_separate_tag(Aead::nonce(j), Aad::from(&aad[..]), c).unwrap())
            .collect();
    }

    fn open(&self, buf: &mut [u8]) {
        let aad = [0x61u8; 100];
        for (j, c) in buf.chunks_mut(CHUNK).enumerate() {
            let tag = self.tags[j];
            self.key.open_in_place_separate_tag(Aead::nonce(j), Aad::from(&aad[..]), tag, c, 0..).unwrap();
        }
    }
}

/// `rchar` and `wchar` of this process.
fn io_counters() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let get = |k: &str| s.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (get("rchar:"), get("wchar:"))
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Runs `f` once and prints the bytes it read and wrote and the peak RSS it
/// added over the RSS before it.
fn account<T>(what: &str, data: u64, f: impl FnOnce() -> T) -> T {
    let rss = status_bytes("VmRSS:");
    // "5" resets the peak RSS (VmHWM) to the current RSS (Linux 4.0+).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let (r0, w0) = io_counters();
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    let (r1, w1) = io_counters();
    let peak = if reset { status_bytes("VmHWM:").saturating_sub(rss) } else { 0 };
    eprintln!(
        "account: {what:<48} {:>8.1} ms  read {:>10.3} MiB  written {:>10.3} MiB  peak RSS added {:>9.1} MiB ({:.3} of the data)",
        elapsed.as_secs_f64() * 1e3,
        (r1 - r0) as f64 / (1 << 20) as f64,
        (w1 - w0) as f64 / (1 << 20) as f64,
        peak as f64 / (1 << 20) as f64,
        peak as f64 / data as f64,
    );
    out
}

struct Files<'a> {
    m: &'a Model,
    aes: std::path::PathBuf,
    /// The same model, encrypted with the same key, not signed.
    aes_unsigned: std::path::PathBuf,
    chacha: std::path::PathBuf,
    plain: std::path::PathBuf,
    read: ReadOptions,
    trusted: ReadOptions,
    encrypted: WriteOptions,
    encrypted_unsigned: WriteOptions,
    checksum: WriteOptions,
}

fn load_all(path: &Path, options: &ReadOptions, buf: &mut [u8]) {
    let r = Reader::open_with(path, options.clone()).unwrap();
    r.read_data_into(buf).unwrap();
}

/// `load_all` from the disk: the file's pages dropped from the page cache
/// before each load (not timed), so that every byte comes from the device.
fn load_all_from_disk(b: &mut criterion::Bencher<'_>, path: &Path, options: &ReadOptions, buf: &mut [u8]) {
    b.iter_custom(|iters| {
        let mut spent = Duration::ZERO;
        for _ in 0..iters {
            let file = std::fs::File::open(path).unwrap();
            rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
            let start = Instant::now();
            load_all(path, options, buf);
            spent += start.elapsed();
        }
        spent
    })
}

fn load_all_fresh(path: &Path, options: &ReadOptions) -> Vec<u8> {
    let r = Reader::open_with(path, options.clone()).unwrap();
    let mut buf = vec![0u8; r.header().data_len() as usize];
    r.read_data_into(&mut buf).unwrap();
    buf
}

fn benches(c: &mut Criterion) {
    let m = model(model_mib());
    let dir = bench_dir();
    let one_len = m.tensors.iter().find(|(s, _)| s.name == ONE).map(|(_, d)| d.len()).unwrap();
    eprintln!("model: {} tensors, {} MiB; one tensor: {ONE}, {} bytes", m.tensors.len(), m.bytes >> 20, one_len);

    let key = Arc::new(SymmetricKey::new("bench", &[7u8; 32]).unwrap());
    let signer = Arc::new(SigningKey::from_seed([9u8; 32]).unwrap());
    let mut keys = KeyRing::new();
    keys.add_symmetric(key.clone());
    let read = ReadOptions { keys, ..ReadOptions::default() };
    let trusted = ReadOptions { trusted_signers: vec![signer.verifying_key()], ..read.clone() };
    let enc = |cipher| EncryptOptions { cipher, ..EncryptOptions::new(vec![RecipientKey::Symmetric(key.clone())]) };
    let f = Files {
        m: &m,
        aes: dir.join("model-aes.dt"),
        aes_unsigned: dir.join("model-aes-unsigned.dt"),
        chacha: dir.join("model-chacha.dt"),
        plain: dir.join("model-plain-ck.dt"),
        read,
        trusted,
        encrypted: WriteOptions {
            encryption: Some(enc(Cipher::Aes256Gcm)),
            signers: vec![signer.clone()],
            durable: false,
            ..WriteOptions::default()
        },
        encrypted_unsigned: WriteOptions {
            encryption: Some(enc(Cipher::Aes256Gcm)),
            durable: false,
            ..WriteOptions::default()
        },
        checksum: WriteOptions { checksum: true, durable: false, ..WriteOptions::default() },
    };
    let chacha = WriteOptions { encryption: Some(enc(Cipher::ChaCha20Poly1305)), ..f.encrypted.clone() };
    save(&f.aes, ours(&m), &f.encrypted).unwrap();
    save(&f.aes_unsigned, ours(&m), &f.encrypted_unsigned).unwrap();
    save(&f.chacha, ours(&m), &chacha).unwrap();
    save(&f.plain, ours(&m), &f.checksum).unwrap();
    rustix::fs::sync();
    // The data blob: the tensors and the alignment gaps between them.
    let blob = Reader::open(&f.plain).unwrap().header().data_len() as usize;
    accounts(&f);

    let mut g = c.benchmark_group("model/crypto");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    // The open alone (before any throughput is set: it reads no data).
    g.bench_function("open, aes-256-gcm (unwrap key, header MAC, tag table, signature)", |b| {
        b.iter(|| black_box(Reader::open_with(&f.aes, f.read.clone()).unwrap()))
    });
    g.throughput(Throughput::Bytes(m.bytes));

    // Baselines: one core, ring, the same bytes in 1 MiB chunks, in place
    // in a buffer already faulted in. Opening needs ciphertext: each
    // iteration seals it back afterwards (same key and nonces, so the same
    // ciphertext and tags), untimed.
    let mut work: Vec<u8> = m.tensors.iter().flat_map(|(_, d)| d.iter().copied()).collect();
    for (name, alg) in [("aes-256-gcm", &AES_256_GCM), ("chacha20-poly1305", &CHACHA20_POLY1305)] {
        let mut aead = Aead::new(alg);
        if alg == &AES_256_GCM {
            g.bench_function(format!("{name} seal, 1 core (ring)"), |b| b.iter(|| aead.seal(black_box(&mut work))));
        }
        aead.seal(&mut work);
        g.bench_function(format!("{name} open, 1 core (ring)"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    aead.open(black_box(&mut work));
                    total += start.elapsed();
                    aead.seal(&mut work);
                }
                total
            })
        });
    }
    drop(work);
    g.bench_function("sha-256, 1 core (ring)", |b| {
        b.iter(|| {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            for (_, d) in &m.tensors {
                ctx.update(d);
            }
            black_box(ctx.finish());
        })
    });

    // Loads: open (unwrap the data key, check the header MAC and the tag
    // table, verify the signature), then read_data_into. A fresh buffer is
    // `vec![0; len]`, whose pages the kernel supplies on first touch
    // (dropping it is not timed); a prefaulted buffer is reused.
    let mut buf = vec![0u8; blob];
    g.bench_function("load all, aes-256-gcm, fresh buffer", |b| {
        b.iter_with_large_drop(|| load_all_fresh(&f.aes, &f.read))
    });
    // A signed file: every tensor's ciphertext checked against its signed
    // digest as it is decrypted (FORMAT 11.2), with or without requirements.
    g.bench_function("load all, aes-256-gcm, prefaulted buffer", |b| b.iter(|| load_all(&f.aes, &f.read, &mut buf)));
    g.bench_function("load all, aes-256-gcm, unsigned, prefaulted buffer", |b| {
        b.iter(|| load_all(&f.aes_unsigned, &f.read, &mut buf))
    });
    g.bench_function("load all, aes-256-gcm, unsigned, fresh buffer", |b| {
        b.iter_with_large_drop(|| load_all_fresh(&f.aes_unsigned, &f.read))
    });
    // The same two from the disk: the signed file's hashing runs while
    // the next chunks are read.
    g.bench_function("load all, aes-256-gcm, from disk, prefaulted buffer", |b| {
        load_all_from_disk(b, &f.aes, &f.read, &mut buf)
    });
    g.bench_function("load all, aes-256-gcm, unsigned, from disk, prefaulted buffer", |b| {
        load_all_from_disk(b, &f.aes_unsigned, &f.read, &mut buf)
    });
    g.bench_function("load all, aes-256-gcm, trusted signer (checked reads), prefaulted", |b| {
        b.iter(|| load_all(&f.aes, &f.trusted, &mut buf))
    });
    g.bench_function("load all, chacha20-poly1305, prefaulted buffer", |b| {
        b.iter(|| load_all(&f.chacha, &f.read, &mut buf))
    });
    g.bench_function("load all, plain, fresh buffer", |b| b.iter_with_large_drop(|| load_all_fresh(&f.plain, &f.read)));
    g.bench_function("load all, plain, prefaulted buffer", |b| b.iter(|| load_all(&f.plain, &f.read, &mut buf)));
    // The floor of every load: the same number of bytes copied from one
    // buffer to another, both faulted in, on all cores. A load must read
    // every byte and write every byte, as this does, whatever the cipher.
    let source = vec![1u8; blob];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    g.bench_function("memcpy, all cores (the floor of a load)", |b| {
        b.iter(|| {
            let part = blob.div_ceil(cores).max(1);
            std::thread::scope(|s| {
                for (to, from) in buf.chunks_mut(part).zip(source.chunks(part)) {
                    s.spawn(move || to.copy_from_slice(black_box(from)));
                }
            });
        })
    });
    drop(source);
    drop(buf);

    // Saves, each from a clean page cache (see `clean_writes`).
    let out = dir.join("model-crypto-out");
    for durable in [false, true] {
        let tag = if durable { "durable" } else { "not durable" };
        let with = |o: &WriteOptions| WriteOptions { durable, ..o.clone() };
        let (ck, en) = (with(&f.checksum), with(&f.encrypted));
        g.bench_function(format!("save plain + checksum, {tag}"), |b| {
            clean_writes(b, &out, || drop(save(&out, ours(&m), &ck).unwrap()))
        });
        g.bench_function(format!("save aes-256-gcm + signed, {tag}"), |b| {
            clean_writes(b, &out, || drop(save(&out, ours(&m), &en).unwrap()))
        });
    }
    g.bench_function("save aes-256-gcm, unsigned, not durable", |b| {
        clean_writes(b, &out, || drop(save(&out, ours(&m), &f.encrypted_unsigned).unwrap()))
    });
    let _ = std::fs::remove_file(&out);

    // One tensor.
    g.throughput(Throughput::Bytes(one_len as u64));
    let mut one = vec![0u8; one_len];
    g.sampling_mode(SamplingMode::Auto);
    g.bench_function("load one tensor, aes-256-gcm, prefaulted buffer", |b| {
        b.iter(|| Reader::open_with(&f.aes, f.read.clone()).unwrap().read_into(ONE, &mut one).unwrap())
    });
    g.bench_function("load one tensor, aes-256-gcm, fresh buffer", |b| {
        b.iter_with_large_drop(|| Reader::open_with(&f.aes, f.read.clone()).unwrap().read(ONE).unwrap())
    });
    g.bench_function("load one tensor, plain, prefaulted buffer", |b| {
        b.iter(|| Reader::open_with(&f.plain, f.read.clone()).unwrap().read_into(ONE, &mut one).unwrap())
    });
    g.finish();
}

/// The untimed single runs that print bytes read and written and peak RSS.
fn accounts(f: &Files<'_>) {
    let data = f.m.bytes;
    let keep = account("load all, aes-256-gcm, fresh buffer", data, || load_all_fresh(&f.aes, &f.read));
    drop(keep);
    let keep = account("load all, plain, fresh buffer", data, || load_all_fresh(&f.plain, &f.read));
    drop(keep);
    let one = account("load one tensor, aes-256-gcm, fresh buffer", data, || {
        Reader::open_with(&f.aes, f.read.clone()).unwrap().read(ONE).unwrap()
    });
    drop(one);
    let out = bench_dir().join("model-crypto-out");
    for (what, options) in
        [("save aes-256-gcm + signed, not durable", &f.encrypted), ("save plain + checksum, not durable", &f.checksum)]
    {
        let _ = std::fs::remove_file(&out);
        rustix::fs::sync();
        account(what, data, || drop(save(&out, ours(f.m), options).unwrap()));
    }
    let _ = std::fs::remove_file(&out);
}

criterion_group! {
    name = crypto;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = benches
}
criterion_main!(crypto);
