//! A reader held to a signed model statement's commitments
//! ([`crate::trust::commitment`]): its head checked on open, its tensors on read.

use super::Reader;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::pread::read_exact_at;
use crate::trust::commitment::ModelCommitments;

impl Reader {
    /// Checks this file's head against the commitments for its path and
    /// takes their tensor digests as the header's: every read is then
    /// checked against what the statement commits to (checked reads).
    pub(super) fn commit_to(&mut self, model: &ModelCommitments) -> Result<()> {
        let c = model.for_file(&self.path)?;
        let path = self.path.clone();
        let mismatch = |m: String| Error::new(ErrorKind::ModelMismatch(m), Some(&path), "cannot open");
        if self.is_encrypted() || self.head.is_compressed() || self.head.is_chunk_compressed() {
            return Err(mismatch("an encrypted or compressed file is not checked tensor by tensor".into()));
        }
        if self.head.data_start != c.head_len {
            return Err(mismatch(format!(
                "the header differs from the signed one ({} bytes before the data, {} signed)",
                self.head.data_start, c.head_len
            )));
        }
        let mut head = vec![0u8; c.head_len as usize];
        read_exact_at(&self.file, &mut head, 0).map_err(|e| Error::io(e, &path, "cannot open"))?;
        if crate::fs::hash::sha256(&head) != c.head_sha256 {
            return Err(mismatch("the header differs from the signed one (SHA-256 of its head)".into()));
        }
        for (name, digest) in &c.tensors {
            let Some(position) = self.head.header.position(name) else {
                return Err(mismatch(format!("the signed tensor {name:?} is not in the file")));
            };
            match self.head.header.tensors()[position].sha256.as_deref() {
                Some(own) if own != digest => {
                    return Err(mismatch(format!("tensor {name:?}: its header's digest is not the signed one")));
                }
                _ => {
                    self.head.header.set_tensor_digest(position, *digest);
                }
            }
        }
        if let Some(t) = self.head.header.tensors().iter().find(|t| t.sha256.is_none()) {
            return Err(mismatch(format!("tensor {:?} has no signed digest", t.name)));
        }
        self.trust.checked_reads = true;
        Ok(())
    }
}
