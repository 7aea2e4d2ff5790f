//! The chunk cipher: seals and opens the chunks of encrypted tensors in
//! place, with the nonces and associated data `deathtensors-format` lays
//! out (`docs/FORMAT.md` 10.5).

use deathtensors_format::{chunk_count, chunk_nonce, chunk_range, ChunkAad, Encryption, Label, TensorInfo, TAG_LEN};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag};

use super::wrap::{aead_key, DataKey};

/// Encrypts and decrypts the chunks of one file.
pub(crate) struct ChunkCipher {
    key: LessSafeKey,
    file_id: [u8; 16],
    nonce_salt: [u8; 12],
    chunk_size: u64,
}

impl std::fmt::Debug for ChunkCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChunkCipher")
    }
}

/// One tensor's chunks, as a cipher sees them.
pub(crate) struct TensorChunks<'a> {
    cipher: &'a ChunkCipher,
    index: u32,
    aad: ChunkAad,
    byte_len: u64,
    count: u64,
}

impl ChunkCipher {
    pub(crate) fn new(enc: &Encryption, dk: &DataKey) -> ChunkCipher {
        let key = dk.derive(&enc.file_id, Label::Chunks);
        ChunkCipher {
            key: aead_key(enc.cipher, &key),
            file_id: enc.file_id,
            nonce_salt: enc.nonce_salt,
            chunk_size: enc.chunk_size,
        }
    }

    pub(crate) fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The chunks of the tensor at `index` (header order).
    pub(crate) fn tensor(&self, index: usize, info: &TensorInfo) -> TensorChunks<'_> {
        // Tensor counts are bounded by `Limits::max_tensors`, far below u32::MAX.
        let index = index as u32;
        let byte_len = info.byte_len();
        TensorChunks {
            cipher: self,
            index,
            aad: ChunkAad::new(&self.file_id, index, info),
            byte_len,
            count: chunk_count(byte_len, self.chunk_size),
        }
    }
}

impl TensorChunks<'_> {
    /// The byte range of chunk `j` within the tensor.
    pub(crate) fn range(&self, j: u64) -> (u64, u64) {
        chunk_range(self.byte_len, self.cipher.chunk_size, j)
    }

    /// Encrypts chunk `j` in place and returns its tag.
    pub(crate) fn seal(&mut self, j: u64, buf: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = Nonce::assume_unique_for_key(chunk_nonce(&self.cipher.nonce_salt, self.index, j));
        let aad = Aad::from(self.aad.for_chunk(j, j + 1 == self.count));
        // A chunk is at most 64 MiB, far below both ciphers' per-message limit.
        let tag = self.cipher.key.seal_in_place_separate_tag(nonce, aad, buf).expect("chunk within AEAD limits");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Decrypts chunk `j` in place; `false` (and `buf` zeroed) if its tag
    /// does not verify.
    pub(crate) fn open(&mut self, j: u64, buf: &mut [u8], tag: &[u8]) -> bool {
        let nonce = Nonce::assume_unique_for_key(chunk_nonce(&self.cipher.nonce_salt, self.index, j));
        let aad = Aad::from(self.aad.for_chunk(j, j + 1 == self.count));
        let Ok(tag) = <[u8; TAG_LEN]>::try_from(tag) else { return false };
        let ok = self.cipher.key.open_in_place_separate_tag(nonce, aad, Tag::from(tag), buf, 0..).is_ok();
        if !ok {
            // ring leaves unverified plaintext behind; nothing unverified is returned.
            buf.fill(0);
        }
        ok
    }
}
