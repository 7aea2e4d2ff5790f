//! Hard caps for untrusted input.

/// Hard caps applied while parsing untrusted headers.
///
/// Every allocation the parser makes is bounded by these numbers and by the
/// length of the input, so a hostile file cannot make it allocate without
/// bound. The defaults are generous for real models and may be raised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest JSON header accepted, in bytes. Default 4 GiB
    /// ([`Limits::DEFAULT_MAX_HEADER_LEN`]): a header of 10,000,000 tensors
    /// with names of 35 bytes is about 1 GB, and one of 1,000,000 about
    /// 100 MB. A hostile length costs nothing: a reader refuses a header
    /// longer than the file before reading it, and the decoder allocates in
    /// proportion to the bytes present. Raise it (up to
    /// [`Limits::MAX_HEADER_LEN`]) for still larger headers; safetensors and
    /// bintensors headers stay capped at [`SAFETENSORS_MAX_HEADER`] whatever
    /// this is.
    pub max_header_len: u64,
    /// Most tensors in one file. Default 100,000,000
    /// ([`Limits::DEFAULT_MAX_TENSORS`]): ten times the largest file the
    /// project tests (10 M tensors); a decoded tensor takes memory only as
    /// its JSON text is present, so this bounds nothing a file's length
    /// does not already bound. At most [`Limits::MAX_TENSORS`].
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
    /// The default of [`Limits::max_header_len`]: 4 GiB.
    pub const DEFAULT_MAX_HEADER_LEN: u64 = 4 << 30;

    /// The ceiling of [`Limits::max_header_len`]: 64 GiB; reader options
    /// refuse a larger limit. (Writers refuse headers longer than the
    /// default, which default readers would refuse.)
    pub const MAX_HEADER_LEN: u64 = 64 << 30;

    /// The default of [`Limits::max_tensors`].
    pub const DEFAULT_MAX_TENSORS: u64 = 100_000_000;

    /// The ceiling of [`Limits::max_tensors`]: a decoded header indexes its
    /// tensors with 32-bit positions.
    pub const MAX_TENSORS: u64 = u32::MAX as u64;

    /// The default limits.
    pub const DEFAULT: Limits = Limits {
        max_header_len: Limits::DEFAULT_MAX_HEADER_LEN,
        max_tensors: Limits::DEFAULT_MAX_TENSORS,
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

/// safetensors refuses headers longer than this (its `MAX_HEADER_SIZE`), so
/// our safetensors encoder and decoder do too (bintensors has the same cap):
/// what we write in safetensors' format, safetensors reads. Files that
/// outgrow it (about 1.2 M tensors with 35-byte names) belong in our format,
/// whose cap is [`Limits::max_header_len`].
pub const SAFETENSORS_MAX_HEADER: u64 = 100_000_000;

/// bintensors refuses headers longer than this (its `MAX_HEADER_SIZE`, as
/// safetensors').
pub const BINTENSORS_MAX_HEADER: u64 = SAFETENSORS_MAX_HEADER;

/// `limits` for a safetensors (or bintensors) header: never past safetensors' own cap, so
/// that what we read (and write) safetensors reads too.
pub(crate) fn safetensors_limits(limits: &Limits) -> Limits {
    Limits { max_header_len: limits.max_header_len.min(SAFETENSORS_MAX_HEADER), ..limits.clone() }
}
