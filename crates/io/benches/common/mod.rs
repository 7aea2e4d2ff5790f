//! What the benches of this crate share: the model they load and save, the
//! directory their files go to, and clean-state writes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deathtensors_format::{Dtype, TensorSpec};

pub struct Model {
    pub tensors: Vec<(TensorSpec, Vec<u8>)>,
    pub bytes: u64,
}

/// Deterministic non-zero bytes (zero pages would make copies look free).
pub fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() + 8 <= len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.resize(len, 0x5a);
    v
}

/// A transformer-like model of about `mib` MiB: an embedding, 24 layers of
/// attention and MLP weights (BF16), norms (F32), and a few I64 buffers.
pub fn model(mib: u64) -> Model {
    let target = mib << 20;
    let layers = 24u64;
    // Per layer: 4 attention matrices d×d and 3 MLP matrices d×4d, BF16.
    // bytes ≈ layers * (4 + 12) * d² * 2 + embedding 32000 * d * 2.
    let mut d = 256u64;
    while layers * 16 * (d + 64) * (d + 64) * 2 + 32000 * (d + 64) * 2 <= target {
        d += 64;
    }
    let mut specs = vec![(TensorSpec::new("model.embed_tokens.weight", Dtype::BF16, [32000, d]))];
    for l in 0..layers {
        for m in ["q", "k", "v", "o"] {
            specs.push(TensorSpec::new(format!("model.layers.{l}.self_attn.{m}_proj.weight"), Dtype::BF16, [d, d]));
        }
        for (m, shape) in [("gate", [4 * d, d]), ("up", [4 * d, d]), ("down", [d, 4 * d])] {
            specs.push(TensorSpec::new(format!("model.layers.{l}.mlp.{m}_proj.weight"), Dtype::BF16, shape));
        }
        for n in ["input_layernorm", "post_attention_layernorm"] {
            specs.push(TensorSpec::new(format!("model.layers.{l}.{n}.weight"), Dtype::F32, [d]));
        }
        specs.push(TensorSpec::new(format!("model.layers.{l}.self_attn.rotary_emb.inv_freq"), Dtype::F32, [d / 16]));
        specs.push(TensorSpec::new(format!("model.layers.{l}.position_ids"), Dtype::I64, [1, 2]));
    }
    specs.push(TensorSpec::new("model.norm.weight", Dtype::F32, [d]));
    specs.push(TensorSpec::new("lm_head.bias", Dtype::F32, [32000]));
    let mut bytes = 0;
    let tensors = specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let len = s.dtype.byte_len(s.shape.iter().product()).unwrap();
            bytes += len;
            let data = fill(len as usize, i as u64);
            (s, data)
        })
        .collect();
    Model { tensors, bytes }
}

/// The model's tensors as `save` takes them.
pub fn ours(m: &Model) -> Vec<(TensorSpec, &[u8])> {
    m.tensors.iter().map(|(s, d)| (s.clone(), &d[..])).collect()
}

/// The size of the model, from `DT_BENCH_MIB` (default 1024).
pub fn model_mib() -> u64 {
    std::env::var("DT_BENCH_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(1024)
}

pub fn bench_dir() -> PathBuf {
    // Benchmarks write real files: next to the target dir, on the same disk.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-io");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Times `write` from a clean state each time: the previous output removed
/// and all dirty pages written back first (neither timed). Each write then
/// pays for itself, not for the writeback backlog of the iterations before
/// it (back to back, 1 GiB writes hit the kernel's dirty-page throttling,
/// and a save replacing a file frees the old one's page cache), and every
/// implementation starts from the same state.
pub fn clean_writes(b: &mut criterion::Bencher<'_>, out: &Path, mut write: impl FnMut()) {
    clean_runs(b, out, || {
        let start = Instant::now();
        write();
        start.elapsed()
    })
}

/// As [`clean_writes`], for a `run` that times the part it measures itself.
pub fn clean_runs(b: &mut criterion::Bencher<'_>, out: &Path, mut run: impl FnMut() -> Duration) {
    b.iter_custom(|iters| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let _ = std::fs::remove_file(out);
            rustix::fs::sync();
            total += run();
        }
        total
    })
}
