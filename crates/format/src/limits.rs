//! Hard caps for untrusted input.

/// Hard caps applied while parsing untrusted headers.
///
/// Every allocation the parser makes is bounded by these numbers and by the
/// length of the input, so a hostile file cannot make it allocate without
/// bound. The defaults are generous for real models and may be raised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest JSON header accepted, in bytes. Default 100 MiB: the header of
    /// a model with a million tensors is about 100 MB, and safetensors refuses
    /// headers over 100 MB for the same reason.
    pub max_header_len: u64,
    /// Most tensors in one file. Default 1,000,000: the largest public
    /// checkpoints have tens of thousands.
    pub max_tensors: u64,
    /// Most dimensions of one tensor. Default 64, numpy's maximum.
    pub max_rank: u64,
    /// Longest tensor name, in bytes. Default 4,096, the usual `PATH_MAX`:
    /// names are dotted module paths of a few hundred bytes at most.
    pub max_name_len: u64,
    /// Most entries in the chunk tables of a `compression` section, all
    /// tensors together. Default 4,194,304: 4 TiB of data in 1 MiB chunks,
    /// 32 MiB of table in memory.
    pub max_chunks: u64,
}

impl Limits {
    /// The default limits.
    pub const DEFAULT: Limits = Limits {
        max_header_len: 100 * 1024 * 1024,
        max_tensors: 1_000_000,
        max_rank: 64,
        max_name_len: 4096,
        max_chunks: 1 << 22,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The largest tensor alignment a header may declare: 1 MiB, well past
/// direct I/O's 4 KiB. Our encoder pads the header so that the blob starts at
/// a multiple of the alignment, so larger values would only waste space.
pub const MAX_ALIGNMENT: u64 = 1 << 20;

/// The tensor alignment our deathtensors writers use by default: a cache
/// line, and the widest SIMD register (AVX-512), so every dtype is aligned.
pub const DEFAULT_ALIGNMENT: u64 = 64;
