//! Header decoding and encoding benchmarks.
//!
//! Inputs are built in memory: `n` tensors with transformer-like names
//! (`model.layers.{i}.self_attn.q_proj.weight`, ...), mixed dtypes (BF16,
//! F32, I64) and small 1-3 dimensional shapes, encoded both as a deathtensors
//! v1 file and as the equivalent safetensors file (each head followed by its
//! zeroed data blob, so that length checks see a real file).
//!
//! Groups:
//! - `header_20k`, `header_300`: decoding the whole head of a file.
//!   `safetensors_read_metadata` is `safetensors::SafeTensors::read_metadata`
//!   on the safetensors file; `ours_safetensors` and `ours_deathtensors` are
//!   `Head::parse` on the safetensors and the deathtensors file; the
//!   `_2_threads` rows are `Head::parse_with` and a `Fork` of two scoped
//!   threads (what `deathtensors-io` opens files with): a large object of
//!   tensors decoded in two halves at once, then its name index built while
//!   its layout is checked. Decoding is timed without freeing what it
//!   returned (`iter_with_large_drop`, for both libraries);
//!   `ours_deathtensors_drop` times freeing a decoded header.
//! - `header_20k_escaped_name`: the 20k safetensors file with one tensor
//!   name holding a `"`, escaped in JSON. Our fast path takes only headers
//!   without escapes, so this measures our full (serde) decoder.
//! - `encode_20k`, `encode_300`: `Head::encode` of both formats.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use deathtensors_format::{Dtype, Flags, Fork, Head, Header, Limits, Metadata, TensorSpec};

/// The second job on a scoped thread, as `deathtensors-io` does it.
struct Threads;

impl Fork for Threads {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        std::thread::scope(|s| {
            let h = s.spawn(b);
            a();
            h.join().expect("no panic");
        });
    }
}

/// Per-layer tensors of a Llama-like decoder: (suffix, dtype, shape).
const LAYER: &[(&str, Dtype, &[u64])] = &[
    ("input_layernorm.weight", Dtype::F32, &[32]),
    ("self_attn.q_proj.weight", Dtype::BF16, &[32, 32]),
    ("self_attn.q_proj.bias", Dtype::BF16, &[32]),
    ("self_attn.k_proj.weight", Dtype::BF16, &[8, 32]),
    ("self_attn.k_proj.bias", Dtype::BF16, &[8]),
    ("self_attn.v_proj.weight", Dtype::BF16, &[8, 32]),
    ("self_attn.v_proj.bias", Dtype::BF16, &[8]),
    ("self_attn.o_proj.weight", Dtype::BF16, &[32, 32]),
    ("self_attn.rotary_emb.inv_freq", Dtype::F32, &[16]),
    ("post_attention_layernorm.weight", Dtype::F32, &[32]),
    ("mlp.gate_proj.weight", Dtype::BF16, &[64, 32]),
    ("mlp.up_proj.weight", Dtype::BF16, &[64, 32]),
    ("mlp.down_proj.weight", Dtype::BF16, &[32, 64]),
    ("mlp.experts.gate_up.weight", Dtype::BF16, &[2, 64, 32]),
    ("mlp.router.position_ids", Dtype::I64, &[1, 16]),
    ("mlp.router.scale", Dtype::F32, &[2, 2, 2]),
];

/// `n` tensor specs: an embedding, then as many layers as fit, then the
/// final norm and head.
fn specs(n: usize) -> Vec<TensorSpec> {
    let mut out = Vec::with_capacity(n);
    out.push(TensorSpec::new("model.embed_tokens.weight", Dtype::BF16, [128, 32]));
    let tail = [
        TensorSpec::new("model.norm.weight", Dtype::F32, [32]),
        TensorSpec::new("lm_head.weight", Dtype::BF16, [128, 32]),
    ];
    let mut layer = 0;
    'outer: loop {
        for (suffix, dtype, shape) in LAYER {
            if out.len() + tail.len() == n {
                break 'outer;
            }
            out.push(TensorSpec::new(format!("model.layers.{layer}.{suffix}"), *dtype, shape.to_vec()));
        }
        layer += 1;
    }
    out.extend(tail);
    out
}

/// A whole file: head, then the zeroed data blob.
fn file(header: &Header) -> Vec<u8> {
    let mut out = Head::encode(header, Flags::EMPTY).expect("encode");
    out.resize(out.len() + header.data_len() as usize, 0);
    out
}

struct Input {
    n: usize,
    deathtensors: Header,
    safetensors: Header,
    dt_file: Vec<u8>,
    st_file: Vec<u8>,
    /// `st_file` with a `"` in the first tensor's name.
    st_escaped_file: Vec<u8>,
}

fn input(n: usize) -> Input {
    let limits = Limits::DEFAULT;
    let mut global = Metadata::new();
    global.insert("format".into(), "pt".into());
    let deathtensors = Header::new_deathtensors(specs(n), global.clone(), 64, None, &limits).expect("layout");
    let safetensors = Header::new_safetensors(specs(n), Some(global), &limits).expect("layout");
    let dt_file = file(&deathtensors);
    let st_file = file(&safetensors);

    // Sanity: both parse back to the same header, and safetensors itself
    // accepts our safetensors file with the same tensors.
    let dt = Head::parse(&dt_file, dt_file.len() as u64, &limits).expect("parse dt");
    assert_eq!(dt.header, deathtensors);
    assert_eq!(dt.header.len(), n);
    let st = Head::parse(&st_file, st_file.len() as u64, &limits).expect("parse st");
    assert_eq!(st.header, safetensors);
    let (_, meta) = safetensors::SafeTensors::read_metadata(&st_file).expect("safetensors");
    assert_eq!(meta.tensors().len(), n);
    for t in safetensors.tensors() {
        let info = &meta.info(&t.name).expect("tensor in safetensors' view");
        assert_eq!(info.data_offsets, (t.data_offsets.0 as usize, t.data_offsets.1 as usize));
        let shape: Vec<u64> = info.shape.iter().map(|&d| d as u64).collect();
        assert_eq!(shape, t.shape);
    }
    safetensors::SafeTensors::deserialize(&st_file).expect("safetensors deserialize");

    let mut escaped_specs = specs(n);
    escaped_specs[0].name.push('"');
    let escaped = Header::new_safetensors(escaped_specs, None, &limits).expect("layout");
    let st_escaped_file = file(&escaped);
    let parsed = Head::parse(&st_escaped_file, st_escaped_file.len() as u64, &limits).expect("parse escaped");
    assert_eq!(parsed.header, escaped);
    let (_, meta) = safetensors::SafeTensors::read_metadata(&st_escaped_file).expect("safetensors escaped");
    assert_eq!(meta.tensors().len(), n);

    Input { n, deathtensors, safetensors, dt_file, st_file, st_escaped_file }
}

fn decode(c: &mut Criterion, group: &str, input: &Input) {
    let limits = Limits::DEFAULT;
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(input.n as u64));
    let st = &input.st_file;
    let dt = &input.dt_file;
    g.bench_function("safetensors_read_metadata", |b| {
        b.iter_with_large_drop(|| safetensors::SafeTensors::read_metadata(black_box(st)).expect("read"))
    });
    g.bench_function("ours_safetensors", |b| {
        b.iter_with_large_drop(|| Head::parse(black_box(st), st.len() as u64, &limits).expect("parse"))
    });
    g.bench_function("ours_deathtensors", |b| {
        b.iter_with_large_drop(|| Head::parse(black_box(dt), dt.len() as u64, &limits).expect("parse"))
    });
    g.bench_function("ours_safetensors_2_threads", |b| {
        b.iter_with_large_drop(|| Head::parse_with(black_box(st), st.len() as u64, &limits, &Threads).expect("parse"))
    });
    g.bench_function("ours_deathtensors_2_threads", |b| {
        b.iter_with_large_drop(|| Head::parse_with(black_box(dt), dt.len() as u64, &limits, &Threads).expect("parse"))
    });
    // Freeing a decoded header is timed apart: it is not decoding.
    g.bench_function("ours_deathtensors_drop", |b| {
        b.iter_batched(|| Head::parse(dt, dt.len() as u64, &limits).expect("parse"), drop, BatchSize::LargeInput)
    });
    g.finish();
}

fn escaped(c: &mut Criterion, group: &str, input: &Input) {
    let limits = Limits::DEFAULT;
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(input.n as u64));
    let st = &input.st_escaped_file;
    g.bench_function("safetensors_read_metadata", |b| {
        b.iter(|| safetensors::SafeTensors::read_metadata(black_box(st)).expect("read"))
    });
    g.bench_function("ours_safetensors", |b| {
        b.iter(|| Head::parse(black_box(st), st.len() as u64, &limits).expect("parse"))
    });
    g.finish();
}

fn encode(c: &mut Criterion, group: &str, input: &Input) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(input.n as u64));
    for (name, header) in [("safetensors", &input.safetensors), ("deathtensors", &input.deathtensors)] {
        g.bench_with_input(BenchmarkId::new("ours", name), header, |b, h| {
            b.iter(|| Head::encode(black_box(h), Flags::EMPTY).expect("encode"))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let big = input(20_000);
    eprintln!(
        "20k tensors: deathtensors head {} B + blob {} B; safetensors head {} B + blob {} B",
        big.dt_file.len() as u64 - big.deathtensors.data_len(),
        big.deathtensors.data_len(),
        big.st_file.len() as u64 - big.safetensors.data_len(),
        big.safetensors.data_len(),
    );
    decode(c, "header_20k", &big);
    escaped(c, "header_20k_escaped_name", &big);
    let small = input(300);
    decode(c, "header_300", &small);
    encode(c, "encode_20k", &big);
    encode(c, "encode_300", &small);
}

criterion_group!(header, benches);
criterion_main!(header);
