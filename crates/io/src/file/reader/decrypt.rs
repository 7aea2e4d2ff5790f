//! Encrypted and signed files: what opening them found (signers, the
//! chunk cipher), their tags, and decryption.

use deathtensors_format::TensorInfo;

use super::Reader;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::hash;
use crate::fs::pread::read_exact_at;
use crate::trust::access;
use crate::trust::crypt::VerifyingKey;

impl Reader {
    /// Whether the tensors are encrypted.
    pub fn is_encrypted(&self) -> bool {
        self.head.header.encryption().is_some() || self.trust.cryptotensors
    }

    /// Whether the header is sealed (`docs/FORMAT.md` 10.8). Without a key
    /// the reader sees no tensor; with one, the file as if it were not sealed.
    pub fn is_sealed(&self) -> bool {
        self.head.sealed.is_some()
    }

    /// Whether this is a cryptotensors file (safetensors with encrypted
    /// tensors, `docs/FORMAT.md` section 12).
    pub fn is_cryptotensors(&self) -> bool {
        self.trust.cryptotensors
    }

    /// Whether tensor `name` is stored encrypted (every tensor of an
    /// encrypted deathtensors file; those listed in a cryptotensors file).
    pub fn is_tensor_encrypted(&self, name: &str) -> bool {
        self.head.header.encryption().is_some() || self.trust.ct_encrypted.contains(name)
    }

    /// Whether a key given at open unwrapped the data key (so encrypted
    /// tensors can be read).
    pub fn can_decrypt(&self) -> bool {
        self.trust.cipher.is_some() || self.trust.ct.is_some()
    }

    /// The signature records of a signed file (all verified at open).
    pub fn signatures(&self) -> &[deathtensors_format::SignatureRecord] {
        &self.trust.signatures
    }

    /// The signers whose signatures verified at open.
    pub fn signers(&self) -> &[VerifyingKey] {
        &self.trust.signers
    }

    /// Decrypts every chunk of every tensor (into a bounded buffer, then
    /// dropped), so that every tag is checked: what a full verification of
    /// an encrypted file does for a key holder. `progress` gets the bytes
    /// of each step.
    ///
    /// # Errors
    /// `NoKey` without a key; `Decrypt` naming the first tensor and chunk
    /// that fails; `Io`.
    pub fn verify_tags(&self, mut progress: impl FnMut(u64)) -> Result<()> {
        if !self.is_encrypted() {
            return Ok(());
        }
        // Whole chunks per step: no partial-chunk copies. A cryptotensors
        // tensor may be one AEAD message: it is decrypted whole.
        let step = match self.head.header.encryption() {
            Some(e) => (16u64 << 20).max(e.chunk_size) / e.chunk_size * e.chunk_size,
            None => u64::MAX,
        };
        let mut buf = Vec::new();
        for t in self.head.header.tensors().iter().filter(|t| self.is_tensor_encrypted(&t.name)) {
            let len = t.byte_len();
            let mut at = 0;
            loop {
                let n = (len - at).min(step);
                buf.resize(n as usize, 0);
                self.decrypt_into(&t.name, at, &mut buf)?;
                progress(n);
                at += n;
                if at >= len {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Refuses zero-copy access to encrypted data.
    pub(super) fn plaintext_only(&self, doing: &'static str) -> Result<()> {
        if self.is_encrypted() {
            return Err(Error::input("the data is encrypted: read it with read() or read_into()", &self.path, doing));
        }
        Ok(())
    }

    /// Whether every tensor returned is checked against its signed digest
    /// (the caller required a signature or encryption, or the file is signed
    /// and not encrypted, its tensors then having no tags): reads hash the
    /// very bytes they return, every time, and nothing is mapped.
    pub fn checked_reads(&self) -> bool {
        self.trust.checked_reads
    }

    /// `NoKey` for a sealed file opened without its key: its header hides
    /// every tensor, and whatever lists, compares or checks them all must
    /// not take it for a file without any.
    ///
    /// # Errors
    /// `NoKey`, naming the file's recipients.
    pub fn check_not_hidden(&self) -> Result<()> {
        if self.is_sealed() && self.trust.cipher.is_none() {
            let recipients = access::recipients(&self.head);
            return Err(Error::new(ErrorKind::NoKey { recipients }, Some(&self.path), "cannot read"));
        }
        Ok(())
    }

    /// Decrypts every tensor into its place in `buf` (the blob), tensors
    /// shared out to all cores as each finishes one; gaps are zeroed. On an
    /// error, `buf` is zeroed.
    pub(super) fn decrypt_tensors(&self, buf: &mut [u8]) -> Result<()> {
        let mut order: Vec<&TensorInfo> = self.head.header.tensors().iter().collect();
        order.sort_by_key(|t| t.data_offsets);
        // Disjoint slices, one per tensor, in offset order (layouts never overlap).
        let mut slices: Vec<(&TensorInfo, &mut [u8])> = Vec::with_capacity(order.len());
        let mut rest: &mut [u8] = &mut *buf;
        let mut at = 0u64;
        for t in order {
            let (start, end) = t.data_offsets;
            let (gap, tail) = std::mem::take(&mut rest).split_at_mut((start - at) as usize);
            gap.fill(0);
            let (mine, tail) = tail.split_at_mut((end - start) as usize);
            slices.push((t, mine));
            rest = tail;
            at = end;
        }
        rest.fill(0);
        let queue = std::sync::Mutex::new(slices.into_iter());
        let result = std::thread::scope(|s| {
            let handles: Vec<_> = (0..hash::threads())
                .map(|_| {
                    s.spawn(|| -> Result<()> {
                        loop {
                            let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
                            let Some((t, slice)) = next else { return Ok(()) };
                            self.decrypt_into(&t.name, 0, slice)?;
                        }
                    })
                })
                .collect();
            handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        });
        if result.is_err() {
            buf.fill(0);
        }
        result
    }

    /// Decrypts `buf.len()` bytes of an encrypted tensor from `offset`.
    pub(super) fn decrypt_into(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        if self.trust.cryptotensors {
            return match &self.trust.ct {
                Some(ct) if ct.has(name) => ct.decrypt(&self.file, &self.path, t.info, t.file_offset, offset, buf),
                Some(_) if self.trust.checked_reads => Err(Error::input(
                    format!(
                        "tensor {name:?} of this cryptotensors file is stored in the clear, and nothing in the file \
                         authenticates its bytes (its signature covers only the header)"
                    ),
                    &self.path,
                    "cannot read",
                )),
                Some(_) => read_exact_at(&self.file, buf, t.file_offset + offset)
                    .map_err(|e| Error::io(e, &self.path, "cannot read")),
                None => Err(Error::new(
                    ErrorKind::NoKey { recipients: vec!["the cryptotensors master and signing keys".into()] },
                    Some(&self.path),
                    "cannot read",
                )),
            };
        }
        let index = self.head.header.position(name).unwrap_or(0);
        access::decrypt_range(
            &self.file,
            &self.path,
            &self.head,
            &self.trust,
            index,
            t.info,
            t.file_offset,
            offset,
            buf,
        )
    }
}
