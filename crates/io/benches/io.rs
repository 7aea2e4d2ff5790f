//! Ours and the `safetensors` crate side by side, in one run, on the same
//! data: a ~1 GiB transformer-like model (~300 tensors of BF16/F32/I64) and a
//! file of 20,000 tiny tensors. Baselines: a plain memcpy of the same bytes
//! from the page cache, a single-core SHA-256 pass, and plain writes of the
//! same bytes: into the page cache, its fsync alone, and both.
//!
//! `cargo bench -p deathtensors-io --bench io` (or `cargo xtask bench`).
//! Set `DT_BENCH_MIB` to change the model size (default 1024).

mod common;

use std::hint::black_box;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{bench_dir, clean_runs, clean_writes, fill, model, model_mib, ours, Model};
use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use deathtensors_format::{Dtype, TensorSpec};
use deathtensors_io::{save, Reader, RegionCheck, RegionRead, WriteOptions};

fn tiny(n: usize) -> Model {
    let tensors: Vec<_> = (0..n)
        .map(|i| {
            let dtype = [Dtype::F32, Dtype::BF16, Dtype::I64][i % 3];
            let s = TensorSpec::new(format!("model.layers.{}.block.{}.weight", i / 16, i % 16), dtype, [4]);
            let len = dtype.byte_len(4).unwrap() as usize;
            (s, fill(len, i as u64))
        })
        .collect();
    let bytes = tensors.iter().map(|(_, d)| d.len() as u64).sum();
    Model { tensors, bytes }
}

fn st_dtype(d: Dtype) -> safetensors::Dtype {
    match d {
        Dtype::BF16 => safetensors::Dtype::BF16,
        Dtype::F32 => safetensors::Dtype::F32,
        Dtype::I64 => safetensors::Dtype::I64,
        other => panic!("bench uses no {other}"),
    }
}

fn st_views(m: &Model) -> Vec<(String, safetensors::tensor::TensorView<'_>)> {
    m.tensors
        .iter()
        .map(|(s, d)| {
            let shape: Vec<usize> = s.shape.iter().map(|&x| x as usize).collect();
            (s.name.clone(), safetensors::tensor::TensorView::new(st_dtype(s.dtype), shape, d).unwrap())
        })
        .collect()
}

fn st_map(path: &Path) -> memmap2::Mmap {
    let f = std::fs::File::open(path).unwrap();
    // SAFETY: bench files are not modified while mapped.
    unsafe { memmap2::Mmap::map(&f).unwrap() }
}

/// The model's bytes written to `out` through a 1 MiB buffer, as a plain
/// program would; returns the file, not synced.
fn raw_write(m: &Model, out: &Path) -> std::fs::File {
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out).unwrap());
    for (_, d) in &m.tensors {
        f.write_all(d).unwrap();
    }
    f.into_inner().unwrap()
}

fn suite(c: &mut Criterion, label: &str, m: &Model) {
    let dir = bench_dir();
    let ours_path = dir.join(format!("{label}.dt"));
    let ours_ck_path = dir.join(format!("{label}-ck.dt"));
    let st_path = dir.join(format!("{label}.safetensors"));
    let nondurable = WriteOptions { durable: false, ..WriteOptions::default() };
    save(&ours_path, ours(m), &nondurable).unwrap();
    save(&ours_ck_path, ours(m), &WriteOptions { checksum: true, durable: false, ..WriteOptions::default() }).unwrap();
    safetensors::serialize_to_file(st_views(m), None, &st_path).unwrap();
    let names: Vec<String> = m.tensors.iter().map(|(s, _)| s.name.clone()).collect();
    let one = &names[names.len() / 2];

    let mut g = c.benchmark_group(format!("{label}/open"));
    g.bench_function("ours", |b| b.iter(|| black_box(Reader::open(&ours_path).unwrap().header().len())));
    g.bench_function("ours(safetensors file)", |b| {
        b.iter(|| black_box(Reader::open(&st_path).unwrap().header().len()))
    });
    g.bench_function("safetensors", |b| {
        b.iter(|| {
            let map = st_map(&st_path);
            black_box(safetensors::SafeTensors::deserialize(&map).unwrap().len());
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("{label}/read_all_owned"));
    g.throughput(Throughput::Bytes(m.bytes));
    g.sample_size(10);
    g.bench_function("ours", |b| {
        b.iter(|| {
            let r = Reader::open(&ours_path).unwrap();
            let all: Vec<Vec<u8>> = names.iter().map(|n| r.read(n).unwrap()).collect();
            black_box(all);
        })
    });
    g.bench_function("safetensors", |b| {
        b.iter(|| {
            let map = st_map(&st_path);
            let st = safetensors::SafeTensors::deserialize(&map).unwrap();
            let all: Vec<Vec<u8>> = names.iter().map(|n| st.tensor(n).unwrap().data().to_vec()).collect();
            black_box(all);
        })
    });
    // Baseline: memcpy of the same bytes from the page cache (a mapping of
    // the file, already faulted in) into fresh buffers.
    let map = st_map(&st_path);
    let st = safetensors::SafeTensors::deserialize(&map).unwrap();
    let ranges: Vec<&[u8]> = names.iter().map(|n| st.tensor(n).unwrap().data()).collect();
    g.bench_function("memcpy baseline", |b| {
        b.iter(|| {
            let all: Vec<Vec<u8>> = ranges.iter().map(|r| r.to_vec()).collect();
            black_box(all);
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("{label}/read_one"));
    g.bench_function("ours", |b| {
        b.iter(|| {
            let r = Reader::open(&ours_path).unwrap();
            black_box(r.read(one).unwrap());
        })
    });
    g.bench_function("safetensors", |b| {
        b.iter(|| {
            let map = st_map(&st_path);
            let st = safetensors::SafeTensors::deserialize(&map).unwrap();
            black_box(st.tensor(one).unwrap().data().to_vec());
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("{label}/write"));
    g.throughput(Throughput::Bytes(m.bytes));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    let out = dir.join(format!("{label}-out"));
    let checksum = WriteOptions { checksum: true, durable: false, ..WriteOptions::default() };
    g.bench_function("ours", |b| clean_writes(b, &out, || drop(save(&out, ours(m), &nondurable).unwrap())));
    g.bench_function("safetensors", |b| {
        clean_writes(b, &out, || safetensors::serialize_to_file(st_views(m), None, &out).unwrap())
    });
    g.bench_function("ours durable", |b| {
        clean_writes(b, &out, || drop(save(&out, ours(m), &WriteOptions::default()).unwrap()))
    });
    // Durable saves are judged against the larger of these: the same bytes
    // written into the page cache, and the disk's own time for them (the
    // fsync of bytes already there). A save that writes, then fsyncs, takes
    // their sum: the fsync'd write.
    g.bench_function("page-cache write baseline", |b| clean_writes(b, &out, || drop(raw_write(m, &out))));
    g.bench_function("fsync only baseline", |b| {
        clean_runs(b, &out, || {
            let f = raw_write(m, &out);
            let start = Instant::now();
            f.sync_all().unwrap();
            start.elapsed()
        })
    });
    g.bench_function("fsync'd write baseline", |b| clean_writes(b, &out, || raw_write(m, &out).sync_all().unwrap()));
    g.bench_function("ours checksum", |b| clean_writes(b, &out, || drop(save(&out, ours(m), &checksum).unwrap())));
    g.bench_function("sha256 single-core baseline", |b| {
        b.iter(|| {
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            for (_, d) in &m.tensors {
                ctx.update(d);
            }
            black_box(ctx.finish());
        })
    });
    g.finish();

    let mut g = c.benchmark_group(format!("{label}/verify"));
    g.throughput(Throughput::Bytes(m.bytes));
    g.sample_size(10);
    let r = Reader::open(&ours_ck_path).unwrap();
    g.bench_function("ours tensors (all cores)", |b| b.iter(|| r.verify_tensors().unwrap()));
    g.bench_function("ours footer", |b| b.iter(|| r.verify_footer().unwrap()));
    g.bench_function("ours all", |b| b.iter(|| r.verify().unwrap()));
    g.finish();

    // Checked reads on one core (a checkpoint's loading rank): each tensor
    // read and hashed on its own, against a batch that hashes two side by
    // side; the floor is a single-core SHA-256 pass over the same bytes
    // (`write/sha256 single-core baseline`).
    let mut g = c.benchmark_group(format!("{label}/checked_reads"));
    g.throughput(Throughput::Bytes(m.bytes));
    g.sample_size(10);
    let names: Vec<&str> = m.tensors.iter().map(|(s, _)| s.name.as_str()).collect();
    let mut bufs: Vec<Vec<u8>> = m.tensors.iter().map(|(_, d)| vec![0u8; d.len()]).collect();
    g.bench_function("ours one by one", |b| {
        b.iter(|| {
            for (name, buf) in names.iter().zip(bufs.iter_mut()) {
                r.read_verified_into(name, buf).unwrap();
            }
        })
    });
    let whole: Vec<Vec<u64>> = m.tensors.iter().map(|(s, _)| s.shape.clone()).collect();
    let zeros: Vec<Vec<u64>> = whole.iter().map(|s| vec![0; s.len()]).collect();
    g.bench_function("ours batch", |b| {
        b.iter(|| {
            let mut reads: Vec<RegionRead<'_>> = names
                .iter()
                .zip(bufs.iter_mut())
                .zip(zeros.iter().zip(&whole))
                .map(|((name, buf), (start, len))| RegionRead { name, start, len, buf, check: RegionCheck::Stored })
                .collect();
            r.read_regions_into(&mut reads).unwrap();
        })
    });
    g.finish();
    let _ = std::fs::remove_file(&out);
}

fn benches(c: &mut Criterion) {
    let big = model(model_mib());
    eprintln!("model: {} tensors, {} MiB", big.tensors.len(), big.bytes >> 20);
    suite(c, "model", &big);
    drop(big);
    let small = tiny(20_000);
    suite(c, "tiny20k", &small);
}

criterion_group! {
    name = io;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    targets = benches
}
criterion_main!(io);
