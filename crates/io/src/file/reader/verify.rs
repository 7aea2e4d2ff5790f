//! Verification: tensor digests, the footer, and checked reads (every
//! byte checked as it is read).

use deathtensors_format::{TensorInfo, FOOTER_LEN};

use super::{Reader, TensorRef};
use crate::error::{Error, ErrorKind, Result};
use crate::fs::hash::{self, sha256_file_range};
use crate::fs::pread::{read_exact_at, ReadAt, Source};
use crate::fs::sha_lanes::Input;

impl Reader {
    /// Whether whole reads check each tensor that has a digest against it:
    /// under checked reads (where a tensor without one is an error), and for
    /// remote sources (where one without is returned unchecked).
    pub(super) fn digest_reads(&self) -> bool {
        self.trust.checked_reads || (self.is_remote() && self.head.header.has_tensor_digests())
    }

    /// With checked reads, or from a remote source, checks the bytes of a
    /// plaintext tensor about to be returned against its digest.
    pub(super) fn check_read(&self, name: &str, bytes: &[u8]) -> Result<()> {
        if self.checks_every_read(name) {
            return self.check_bytes(name, bytes);
        }
        Ok(())
    }

    /// Whether every read of `name` is checked against its digest
    /// ([`Reader::check_read`]): under a signature or requirement, or from
    /// a remote source when the tensor has a digest. Encrypted tensors are
    /// authenticated as they are decrypted instead.
    pub(super) fn checks_every_read(&self, name: &str) -> bool {
        !self.is_encrypted()
            && (self.trust.checked_reads
                || self.head.header.get(name).is_some_and(|t| t.sha256.is_some()) && self.is_remote())
    }

    /// Refuses mappings under checked reads: a mapping's pages come from the
    /// file after any check, so nothing could be checked for the caller.
    pub(super) fn unchecked_only(&self, doing: &'static str) -> Result<()> {
        if self.trust.checked_reads {
            return Err(Error::input(
                "every tensor of this file is checked against what its signature (or a requirement) commits \
                 to as it is read: tensors are read, not mapped (use read)",
                &self.path,
                doing,
            ));
        }
        Ok(())
    }

    /// [`Reader::read_data_into`] from a remote source with digests to check:
    /// the blob is read in windows of whole tensors (about 64 MiB), each
    /// window's tensors hashed on another thread while the next window is
    /// fetched, so that checking keeps pace with the transfer instead of
    /// following it. A failed digest zeroes `buf`.
    pub(super) fn read_checked_windows(&self, source: &dyn ReadAt, buf: &mut [u8]) -> Result<()> {
        let tensors = self.head.header.tensors();
        let windows = self.windows(buf.len() as u64);
        let (sender, receiver) = std::sync::mpsc::channel::<(u64, &[u8], Vec<usize>)>();
        let result = std::thread::scope(|s| {
            let checker = s.spawn(move || -> Result<()> {
                for (at, bytes, group) in receiver {
                    let digests = window_digests(tensors, &group, bytes, at)
                        .map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
                    for (&i, d) in group.iter().zip(digests) {
                        let t = &tensors[i];
                        if t.sha256.is_some() || self.trust.checked_reads {
                            self.check_digest(&t.name, |_| Ok(d))?;
                        }
                    }
                }
                Ok(())
            });
            let mut rest: &mut [u8] = &mut *buf;
            let mut fetched = Ok(());
            for (start, end, group) in windows {
                let (window, tail) = std::mem::take(&mut rest).split_at_mut((end - start) as usize);
                rest = tail;
                fetched = source
                    .read_exact_at(window, self.head.data_start + start)
                    .map_err(|e| Error::io(e, &self.path, "cannot read"));
                // A checker that stopped (on a mismatch) ends the transfer.
                if fetched.is_err() || sender.send((start, &*window, group)).is_err() {
                    break;
                }
            }
            drop(sender);
            let checked = checker.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            // A corrupt tensor is the more precise report.
            checked.and(fetched)
        });
        if result.is_err() {
            buf.fill(0);
        }
        result
    }

    /// The blob `0..len` cut into windows of whole tensors of about 64 MiB
    /// (a larger tensor is a window of its own): (start, end, tensors), in
    /// order, the last one ending at `len`.
    pub(super) fn windows(&self, len: u64) -> Vec<(u64, u64, Vec<usize>)> {
        /// Large enough for many parallel ranged requests, small enough that
        /// hashing starts early.
        const WINDOW: u64 = 64 << 20;
        let tensors = self.head.header.tensors();
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| tensors[i].data_offsets);
        let mut windows = Vec::new();
        let mut start = 0u64;
        let mut group = Vec::new();
        for i in order {
            group.push(i);
            let end = tensors[i].data_offsets.1;
            if end - start >= WINDOW {
                windows.push((start, end, std::mem::take(&mut group)));
                start = end;
            }
        }
        windows.push((start, len.max(start), group));
        windows
    }

    /// [`Reader::verify`] of a plain file from a remote source: one pass
    /// over the object, each window of whole tensors fetched once, fed to
    /// the footer's hash and hashed for the tensors' digests, so that the
    /// object is transferred once, not once for each check. `None` when it
    /// does not apply (a local file, an encrypted or compressed one).
    pub(super) fn verify_one_pass(&self) -> Option<Result<()>> {
        let Source::Other(source) = &self.file else { return None };
        if self.is_encrypted() || self.is_compressed() {
            return None;
        }
        let (covered_start, covered_end) = self.head.checksummed()?;
        let io = |e| Error::io(e, &self.path, "cannot verify");
        let run = || -> Result<()> {
            let mut footer = hash::Hasher::new();
            let mut buf = vec![0u8; (self.head.data_start - covered_start) as usize];
            source.read_exact_at(&mut buf, covered_start).map_err(io)?;
            footer.update(&buf);
            let tensors = self.head.header.tensors();
            let mut bad: Option<Error> = None;
            for (start, end, group) in self.windows(self.head.data_end - self.head.data_start) {
                buf.resize((end - start) as usize, 0);
                source.read_exact_at(&mut buf, self.head.data_start + start).map_err(io)?;
                footer.update(&buf);
                let digests = window_digests(tensors, &group, &buf, start).map_err(io)?;
                for (&i, d) in group.iter().zip(digests) {
                    if tensors[i].sha256.is_some() && bad.is_none() {
                        bad = self.check_digest(&tensors[i].name, |_| Ok(d)).err();
                    }
                }
            }
            buf.resize((covered_end - self.head.data_end) as usize, 0);
            source.read_exact_at(&mut buf, self.head.data_end).map_err(io)?;
            footer.update(&buf);
            // A corrupt tensor is the more precise report.
            if let Some(e) = bad {
                return Err(e);
            }
            let mut expected = [0u8; 32];
            source.read_exact_at(&mut expected, covered_end).map_err(io)?;
            self.check_footer(expected, footer.finish())
        };
        Some(run())
    }

    /// Under a signature requirement (or from a remote source): checks each
    /// tensor's bytes, at its range in `layout` of `buf`, against its digest
    /// (on all cores), and zeroes `buf` if one fails, so that nothing
    /// unverified is returned. Without a requirement, a tensor without a
    /// digest passes.
    pub(super) fn check_laid_out(&self, buf: &mut [u8], layout: &[(u64, u64)]) -> Result<()> {
        let tensors = self.head.header.tensors();
        let inputs: Vec<Input<'_>> =
            layout.iter().map(|&(start, end)| Input::Bytes(&buf[start as usize..end as usize])).collect();
        let digests = crate::fs::sha_lanes::digests(&inputs).map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
        let bad = tensors
            .iter()
            .zip(digests)
            .find(|(t, d)| t.sha256.as_deref() != Some(d) && (t.sha256.is_some() || self.trust.checked_reads));
        if let Some((t, actual)) = bad {
            let name = t.name.clone();
            let err = self.check_digest(&name, |_| Ok(actual));
            buf.fill(0);
            return err;
        }
        Ok(())
    }

    /// Reads the tensor and checks its bytes against its `sha256` digest.
    ///
    /// # Errors
    /// As [`Reader::read`], plus `NoChecksum` if the tensor has no digest and
    /// `TensorDigestMismatch` if the bytes do not match it.
    pub fn read_verified(&self, name: &str) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; self.unpacked_tensor_len(name)? as usize];
        self.read_verified_into(name, &mut buf)?;
        Ok(buf)
    }

    /// [`Reader::read_into`] then [`Reader::check_bytes`], in one pass for a
    /// plain local file: the tensor is read in pieces of 256 KiB, each
    /// hashed right after it is read, while it is still in the core's cache
    /// (the digest is of the bytes in `buf`, not of the file again). A
    /// failed digest zeroes `buf`.
    ///
    /// # Errors
    /// As [`Reader::read_into`] and [`Reader::check_bytes`].
    pub fn read_verified_into(&self, name: &str, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        if !self.stored_plain(name) || t.info.sha256.is_none() {
            self.read_into(name, buf)?;
            // Not twice: read_into checked already what it checks on every read.
            return if self.checks_every_read(name) { Ok(()) } else { self.check_bytes(name, buf) };
        }
        self.check_buffer(buf, t.info.byte_len(), &format!("tensor {name:?} is"))?;
        const PIECE: usize = 256 << 10;
        let mut h = hash::Hasher::new();
        let mut at = t.file_offset;
        for piece in buf.chunks_mut(PIECE) {
            read_exact_at(&self.file, piece, at).map_err(|e| Error::io(e, &self.path, "cannot read"))?;
            h.update(piece);
            at += piece.len() as u64;
        }
        let actual = h.finish();
        let result = self.check_digest(name, |_| Ok(actual));
        if result.is_err() {
            buf.fill(0);
        }
        result
    }

    /// Checks bytes already read for `name` against its `sha256` digest.
    ///
    /// # Errors
    /// `TensorNotFound`, `NoChecksum` if the tensor has no digest,
    /// `TensorDigestMismatch` if the bytes do not match it.
    pub fn check_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        if self.is_encrypted() {
            // The digest is of the ciphertext (the plaintext was authenticated
            // by its tags when it was decrypted): check the stored bytes.
            return self.verify_tensor(name);
        }
        self.check_digest(name, |_| Ok(hash::sha256(bytes)))
    }

    /// Compares the digest `hash` computes for the tensor with its `sha256`.
    pub(super) fn check_digest(&self, name: &str, hash: impl FnOnce(TensorRef<'_>) -> Result<[u8; 32]>) -> Result<()> {
        let t = self.tensor(name)?;
        let Some(expected) = t.info.sha256.as_deref().copied() else {
            return Err(Error::new(
                ErrorKind::NoChecksum { what: "sha256 digest for this tensor" },
                Some(&self.path),
                "cannot verify",
            ));
        };
        self.check_against(name, expected, hash(t)?)
    }

    /// Compares the digest of `name`'s bytes with `expected` (the header's,
    /// or one the caller holds).
    pub(super) fn check_against(&self, name: &str, expected: [u8; 32], actual: [u8; 32]) -> Result<()> {
        if actual == expected {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::TensorDigestMismatch { tensor: name.to_string(), expected, actual },
            Some(&self.path),
            "verification failed for",
        ))
    }

    /// Whether `name`'s bytes lie in the local file as they are (not
    /// encrypted, compressed nor remote): read in pieces, each hashed as
    /// it lands.
    pub(super) fn stored_plain(&self, name: &str) -> bool {
        !self.is_encrypted() && !self.is_remote() && !self.head.is_compressed() && self.packed(name).is_none()
    }

    /// Checks one tensor against its `sha256` digest, without keeping its bytes.
    ///
    /// # Errors
    /// As [`Reader::read_verified`].
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        self.check_digest(name, |t| {
            if let Some(packed) = self.packed(name) {
                return packed.digest(&mut crate::file::compress::ChunkCodec::new());
            }
            if self.head.is_compressed() {
                let (start, end) = t.info.data_offsets;
                return Ok(hash::sha256(&self.blob()?[start as usize..end as usize]));
            }
            let mut buf = Vec::new();
            sha256_file_range(&self.file, t.file_offset, t.info.byte_len(), &mut buf, &mut |_| {})
                .map_err(|e| Error::io(e, &self.path, "cannot verify"))
        })
    }

    /// Checks the SHA-256 footer: one sequential pass over the file from
    /// byte 24 to the end of the data blob.
    ///
    /// # Errors
    /// `NoChecksum` if the file has no footer, `ChecksumMismatch` if it does
    /// not match, `Io` if the file cannot be read.
    pub fn verify_footer(&self) -> Result<()> {
        self.verify_footer_with(|_| {})
    }

    /// [`Reader::verify_footer`], calling `progress` with the number of
    /// bytes hashed after each chunk (1 MiB), for a progress bar: the pass
    /// covers the whole file, which takes about a minute per 100 GB.
    ///
    /// # Errors
    /// As [`Reader::verify_footer`].
    pub fn verify_footer_with(&self, mut progress: impl FnMut(u64)) -> Result<()> {
        let Some((covered_start, covered_end)) = self.head.checksummed() else {
            return Err(Error::new(
                ErrorKind::NoChecksum { what: "SHA-256 footer" },
                Some(&self.path),
                "cannot verify",
            ));
        };
        let io = |e| Error::io(e, &self.path, "cannot verify");
        let mut expected = [0u8; 32];
        read_exact_at(&self.file, &mut expected, covered_end).map_err(io)?;
        let mut buf = Vec::new();
        let actual = sha256_file_range(&self.file, covered_start, covered_end - covered_start, &mut buf, &mut progress)
            .map_err(io)?;
        // A signature block may follow the footer.
        debug_assert!(self.file_len >= covered_end + FOOTER_LEN);
        self.check_footer(expected, actual)
    }

    /// The footer's SHA-256 (`expected`) against the covered bytes' hash.
    pub(super) fn check_footer(&self, expected: [u8; 32], actual: [u8; 32]) -> Result<()> {
        if actual != expected {
            return Err(Error::new(
                ErrorKind::ChecksumMismatch { expected, actual },
                Some(&self.path),
                "verification failed for",
            ));
        }
        Ok(())
    }

    /// Computes the SHA-256 of each named tensor's bytes, on all cores (two
    /// streams per core where the CPU has the SHA extensions), with
    /// positioned reads; `progress` is called with the number of bytes
    /// hashed as the work goes, from any thread. Whether or not the header
    /// records digests: compare them with [`TensorInfo::sha256`](deathtensors_format::TensorInfo::sha256).
    ///
    /// # Errors
    /// `TensorNotFound`; `Io` if the file cannot be read; `Decompress`.
    pub fn compute_digests(&self, names: &[&str], progress: impl Fn(u64) + Sync) -> Result<Vec<[u8; 32]>> {
        if self.head.is_chunk_compressed() {
            return self.compute_packed_digests(names, progress);
        }
        let tensors = names.iter().map(|n| self.tensor(n)).collect::<Result<Vec<_>>>()?;
        let blob = if self.head.is_compressed() { Some(self.blob()?) } else { None };
        let inputs: Vec<Input<'_>> = tensors
            .iter()
            .map(|t| {
                let (start, end) = t.info.data_offsets;
                match blob {
                    Some(blob) => Input::Bytes(&blob[start as usize..end as usize]),
                    None => Input::File { file: &self.file, offset: t.file_offset, len: end - start },
                }
            })
            .collect();
        crate::fs::sha_lanes::digests_with(&inputs, &progress).map_err(|e| Error::io(e, &self.path, "cannot hash"))
    }

    /// [`Reader::compute_digests`] for a file of compressed tensors: raw
    /// tensors as usual, compressed ones decompressed chunk by chunk, one
    /// tensor per core at a time.
    pub(super) fn compute_packed_digests(
        &self,
        names: &[&str],
        progress: impl Fn(u64) + Sync,
    ) -> Result<Vec<[u8; 32]>> {
        let (packed, raw): (Vec<usize>, Vec<usize>) = (0..names.len()).partition(|&k| self.packed(names[k]).is_some());
        let raw_names: Vec<&str> = raw.iter().map(|&k| names[k]).collect();
        let mut out = vec![[0u8; 32]; names.len()];
        let tensors = raw_names.iter().map(|n| self.tensor(n)).collect::<Result<Vec<_>>>()?;
        let inputs: Vec<Input<'_>> = tensors
            .iter()
            .map(|t| Input::File { file: &self.file, offset: t.file_offset, len: t.info.byte_len() })
            .collect();
        let digests = crate::fs::sha_lanes::digests_with(&inputs, &progress)
            .map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
        for (&k, d) in raw.iter().zip(digests) {
            out[k] = d;
        }
        let slots: Vec<(usize, &mut [u8; 32])> =
            out.iter_mut().enumerate().filter(|(k, _)| packed.contains(k)).collect();
        crate::file::compress::parallel(slots, hash::threads(), |codec, (k, slot)| {
            let p = self.packed(names[k]).ok_or_else(|| {
                Error::new(ErrorKind::TensorNotFound(names[k].to_string()), Some(&self.path), "cannot hash")
            })?;
            *slot = p.digest(codec)?;
            progress(self.head.header.get(names[k]).map_or(0, |t| t.byte_len()));
            Ok(())
        })?;
        Ok(out)
    }

    /// Checks every tensor that carries a digest, on all cores.
    ///
    /// # Errors
    /// `TensorDigestMismatch` naming the first tensor (in header order) that
    /// fails; `Io`; `Decompress`.
    pub fn verify_tensors(&self) -> Result<()> {
        let names: Vec<&str> = self.header().tensors().iter().map(|t| t.name.as_str()).collect();
        self.check_tensors(&names, |_| {})
    }

    /// Checks those of the named tensors that carry a digest, on all cores
    /// (tensors without one pass): what tools that read tensors whole or in
    /// windows (statistics, comparisons, printing) run before they read.
    /// `progress` is told the bytes hashed, from any thread.
    ///
    /// # Errors
    /// `TensorNotFound`; `TensorDigestMismatch` naming the first of `names`
    /// that fails; `Io`; `Decompress`.
    pub fn check_tensors(&self, names: &[&str], progress: impl Fn(u64) + Sync) -> Result<()> {
        let mut with_digest = Vec::with_capacity(names.len());
        for &name in names {
            if self.tensor(name)?.info.sha256.is_some() {
                with_digest.push(name);
            }
        }
        let digests = self.compute_digests(&with_digest, progress)?;
        for (name, digest) in with_digest.iter().zip(digests) {
            self.check_digest(name, |_| Ok(digest))?;
        }
        Ok(())
    }

    /// Checks everything the file carries: the footer and the per-tensor
    /// digests, the digests on all cores while the footer is hashed, and,
    /// for a key holder of an encrypted file, every chunk's tag
    /// ([`Reader::verify_tags`]). From a remote source, one pass serves the
    /// footer and the digests (the object is fetched once).
    ///
    /// # Errors
    /// `NoKey` for a sealed file without its key; `NoChecksum` if the file
    /// has none of them; `Decrypt` naming the
    /// first chunk whose tag fails; otherwise as [`Reader::verify_footer`]
    /// and [`Reader::verify_tensors`].
    ///
    /// Everything checkable is checked, and an encrypted file opened
    /// without its key passes on its footer and digests (which cover its
    /// ciphertext): what signing such a file needs. A front end that
    /// reports to a user takes [`Reader::verify_report`]'s verdict instead,
    /// which does not call that "ok".
    pub fn verify(&self) -> Result<()> {
        self.verify_with(|_| {})
    }

    /// [`Reader::verify`], telling `progress` (from any thread) the bytes
    /// of one pass: the digests' when the file has digests, else the
    /// footer's, then the tags'. So a bar over
    /// [`Reader::verify_progress_len`] bytes ends full, not at twice that.
    ///
    /// # Errors
    /// As [`Reader::verify`].
    pub fn verify_with(&self, progress: impl Fn(u64) + Sync) -> Result<()> {
        self.check_not_hidden()?;
        let tags = self.can_decrypt();
        let has_digests = self.header().tensors().iter().any(|t| t.sha256.is_some());
        // The digests first: a corrupt tensor is named by the more precise
        // report; the tags then cover what no digest does.
        match (self.has_footer(), has_digests) {
            (false, false) if tags => {}
            (false, false) => {
                return Err(Error::new(
                    ErrorKind::NoChecksum { what: "SHA-256 footer or tensor digests" },
                    Some(&self.path),
                    "cannot verify",
                ))
            }
            (true, false) => self.verify_footer_with(&progress)?,
            (false, true) => {
                let names: Vec<&str> = self.header().tensors().iter().map(|t| t.name.as_str()).collect();
                self.check_tensors(&names, &progress)?
            }
            (true, true) => {
                // A remote object: transferred once for both checks.
                if let Some(done) = self.verify_one_pass() {
                    done?;
                } else {
                    let (footer, tensors) = std::thread::scope(|s| {
                        let footer = s.spawn(|| self.verify_footer());
                        let names: Vec<&str> = self.header().tensors().iter().map(|t| t.name.as_str()).collect();
                        let tensors = self.check_tensors(&names, &progress);
                        (footer.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), tensors)
                    });
                    // A corrupt tensor is the more precise report.
                    tensors?;
                    footer?;
                }
            }
        }
        if tags {
            self.verify_tags(&progress)?;
        }
        Ok(())
    }

    /// The bytes [`Reader::verify_with`] reports: one pass over the
    /// tensors with digests (or the footer's range), plus the encrypted
    /// tensors' bytes for a key holder.
    pub fn verify_progress_len(&self) -> u64 {
        let tensors = self.header().tensors();
        let digested: u64 = tensors.iter().filter(|t| t.sha256.is_some()).map(|t| t.stored_len()).sum();
        let pass = match (self.head.checksummed(), digested) {
            (Some((start, end)), 0) => end - start,
            _ => digested,
        };
        let tags: u64 = if self.can_decrypt() {
            tensors.iter().filter(|t| self.is_tensor_encrypted(&t.name)).map(|t| t.byte_len()).sum()
        } else {
            0
        };
        pass + tags
    }
}

/// The SHA-256 of each tensor of `group` in a window of the data blob:
/// `bytes`, which starts `at` bytes into the blob and holds them whole.
fn window_digests(tensors: &[TensorInfo], group: &[usize], bytes: &[u8], at: u64) -> std::io::Result<Vec<[u8; 32]>> {
    let inputs: Vec<Input<'_>> = group
        .iter()
        .map(|&i| {
            let (a, b) = tensors[i].data_offsets;
            Input::Bytes(&bytes[(a - at) as usize..(b - at) as usize])
        })
        .collect();
    crate::fs::sha_lanes::digests(&inputs)
}
