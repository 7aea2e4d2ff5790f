//! The verdict of verifying one file ([`VerifyReport`]), decided here once
//! for every front end: the command line's `verify` renders it, Python's
//! `DtFile.verify()` raises or returns from it. What was checked and what
//! was not are both in it, so no front end can say more than was checked.

use deathtensors_format::TensorInfo;

use super::Reader;
use crate::error::{Error, ErrorKind, Result};

/// A digest that does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The tensor, or `None` for the SHA-256 footer.
    pub tensor: Option<String>,
    /// The file's bytes the digest covers.
    pub range: (u64, u64),
    /// The digest the file records.
    pub expected: [u8; 32],
    /// The digest of the bytes.
    pub actual: [u8; 32],
}

/// The SHA-256 footer's part in a [`VerifyReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FooterCheck {
    /// The file has none.
    Absent,
    /// It matches the bytes it covers.
    Ok,
    /// It does not (see the report's failures).
    Mismatch,
}

/// The encrypted chunks' tags' part in a [`VerifyReport`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagCheck {
    /// The file is not encrypted.
    Absent,
    /// Every chunk decrypted: its tag matched.
    Ok,
    /// The file is encrypted and no key given opens it: not checked.
    NotChecked,
    /// A key opens them, but a digest failed first: not checked.
    Skipped,
}

/// What verifying a file established, and what it could not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// The footer, and the bytes it covers (`None` without one).
    pub footer: (FooterCheck, Option<(u64, u64)>),
    /// How many tensors' digests were checked.
    pub tensors_verified: usize,
    /// How many tensors the file has.
    pub tensors: usize,
    /// The encrypted chunks' tags.
    pub tags: TagCheck,
    /// Tensors nothing checked: no footer, no digest, no tag checked.
    pub unverified: Vec<String>,
    /// Every digest that does not match (tensors first, then the footer).
    pub failures: Vec<Mismatch>,
}

/// The one verdict a report comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything the file carries was checked and matched.
    Ok,
    /// A digest did not match: the file is damaged.
    Failed,
    /// The file carries nothing to check (no footer, digests or tags).
    NothingToCheck,
    /// The file is encrypted and no key opened it: what could be checked
    /// without one may have passed, but its tensors' tags and digests were
    /// not checked. Not "ok": the stricter rule (docs/SECURITY.md).
    KeyNeeded,
}

impl VerifyReport {
    /// The verdict: a failure first, then a missing key, then nothing to
    /// check, else ok.
    pub fn verdict(&self) -> Verdict {
        if !self.failures.is_empty() {
            Verdict::Failed
        } else if self.tags == TagCheck::NotChecked {
            Verdict::KeyNeeded
        } else if self.footer.0 == FooterCheck::Absent && self.tensors_verified == 0 && self.tags != TagCheck::Ok {
            Verdict::NothingToCheck
        } else {
            Verdict::Ok
        }
    }
}

impl VerifyReport {
    /// The verdict as a result, for a front end that raises: `Ok(true)`,
    /// `Ok(false)` for nothing to check, an error for the rest.
    ///
    /// # Errors
    /// `TensorDigestMismatch` naming the first tensor that failed (else
    /// `ChecksumMismatch` for the footer); `NoKey` naming the recipients
    /// when the file is encrypted and no key opened it.
    pub fn into_result(self, reader: &Reader) -> Result<bool> {
        let path = Some(reader.path());
        match self.verdict() {
            Verdict::Ok => Ok(true),
            Verdict::NothingToCheck => Ok(false),
            Verdict::KeyNeeded => {
                let recipients = crate::trust::access::recipients(reader.head());
                Err(Error::new(ErrorKind::NoKey { recipients }, path, "cannot verify"))
            }
            Verdict::Failed => {
                let first = self.failures.into_iter().next();
                let kind = match first {
                    Some(Mismatch { tensor: Some(tensor), expected, actual, .. }) => {
                        ErrorKind::TensorDigestMismatch { tensor, expected, actual }
                    }
                    Some(Mismatch { tensor: None, expected, actual, .. }) => {
                        ErrorKind::ChecksumMismatch { expected, actual }
                    }
                    None => ErrorKind::InvalidInput("a failed verification with no failure".into()),
                };
                Err(Error::new(kind, path, "verification failed for"))
            }
        }
    }
}

impl Reader {
    /// Verifies everything the file carries and reports it: the footer and
    /// every tensor digest at once (the footer's pass on a thread of its
    /// own, the digests on the other cores; `footer` and `digests` are
    /// called with the bytes hashed), then, when those match, the
    /// encrypted chunks' tags (with a key that opens them; `tags` is called
    /// with the bytes decrypted). A damaged tensor is so named by its
    /// digest, the more precise report, before a tag fails on it.
    ///
    /// # Errors
    /// `Decrypt` for a tag that does not match (no report: the bytes are
    /// not the file's); `Io`; `Decompress`. A digest that does not match
    /// is not an error: it is in the report's failures.
    pub fn verify_report(
        &self,
        tags: impl FnMut(u64),
        footer: impl FnMut(u64) + Send,
        digests: impl Fn(u64) + Sync,
    ) -> Result<VerifyReport> {
        let tag_progress = tags;
        let tags = if self.can_decrypt() {
            TagCheck::Ok
        } else if self.is_encrypted() {
            TagCheck::NotChecked
        } else {
            TagCheck::Absent
        };
        let header = self.header();
        let digested: Vec<&TensorInfo> = header.tensors().iter().filter(|t| t.sha256.is_some()).collect();
        let covered = self.head().checksummed();
        let unverified = header
            .tensors()
            .iter()
            .filter(|t| {
                covered.is_none() && t.sha256.is_none() && !(tags == TagCheck::Ok && self.is_tensor_encrypted(&t.name))
            })
            .map(|t| t.name.to_string())
            .collect();
        // A remote object with a footer and digests is transferred once for
        // both checks; only a failure takes the two passes that name it.
        if covered.is_some() && !digested.is_empty() {
            if let Some(Ok(())) = self.verify_one_pass() {
                if tags == TagCheck::Ok {
                    self.verify_tags(tag_progress)?;
                }
                let footer = (FooterCheck::Ok, covered);
                let (tensors_verified, tensors) = (digested.len(), header.len());
                return Ok(VerifyReport { footer, tensors_verified, tensors, tags, unverified, failures: Vec::new() });
            }
        }
        let names: Vec<&str> = digested.iter().map(|t| t.name.as_str()).collect();
        let (footer_result, actual) = std::thread::scope(|s| {
            let job = covered.map(|_| s.spawn(|| self.verify_footer_with(footer)));
            let actual = if names.is_empty() { Ok(Vec::new()) } else { self.compute_digests(&names, digests) };
            (job.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))), actual)
        });
        let mut failures: Vec<Mismatch> = digested
            .iter()
            .zip(actual?)
            .filter_map(|(t, actual)| {
                let expected = *t.sha256.as_deref()?;
                (actual != expected).then(|| {
                    let start = self.head().data_start + t.data_offsets.0;
                    Mismatch {
                        tensor: Some(t.name.to_string()),
                        range: (start, start + t.stored_len()),
                        expected,
                        actual,
                    }
                })
            })
            .collect();
        let footer = match (footer_result, covered) {
            (Some(Ok(())), Some(range)) => (FooterCheck::Ok, Some(range)),
            (Some(Err(e)), Some(range)) => match e.kind() {
                ErrorKind::ChecksumMismatch { expected, actual } => {
                    failures.push(Mismatch { tensor: None, range, expected: *expected, actual: *actual });
                    (FooterCheck::Mismatch, Some(range))
                }
                _ => return Err(e),
            },
            _ => (FooterCheck::Absent, None),
        };
        let tags = match tags {
            TagCheck::Ok if failures.is_empty() => {
                self.verify_tags(tag_progress)?;
                TagCheck::Ok
            }
            TagCheck::Ok => TagCheck::Skipped,
            other => other,
        };
        Ok(VerifyReport { footer, tensors_verified: digested.len(), tensors: header.len(), tags, unverified, failures })
    }
}
