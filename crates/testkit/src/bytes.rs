//! Deterministic test bytes.

/// `len` bytes that do not compress: xorshift64 (shifts 13, 7, 17), its low
/// byte at each step, from the state `seed | 1` (the state must not be
/// zero). The same seed gives the same bytes.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
