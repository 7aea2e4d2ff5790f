//! What a reader checks when it opens an encrypted or signed file
//! (`docs/FORMAT.md` sections 10 and 11), and decrypting tensors for it:
//! the signature block, signatures against the caller's requirements, the
//! tag table, the data key and the header MAC.

use std::path::Path;

use deathtensors_format::{
    parse_signatures, signature_block_len, signed_message, Cryptotensors, Flags, Format, Head, Label, SignatureRecord,
    TensorInfo, MAGIC, SIGNATURE_TRAILER_LEN, TAG_LEN,
};
use ring::hmac;
use subtle::ConstantTimeEq;

use crate::error::{Error, ErrorKind, Result};
use crate::fs::par::{each_chunk, split_chunks};
use crate::fs::pread::{read_exact_at, ReadAt};
use crate::options::ReadOptions;
use crate::trust::crypt::{unwrap_data_key, ChunkCipher, VerifyingKey};

const DOING: &str = "cannot open";

/// The global metadata key of a deathtensors file's Rego policy.
pub const POLICY_KEY: &str = "__policy__";

/// What a reader learnt from a file's security features.
#[derive(Debug, Default)]
pub(crate) struct Trust {
    /// The chunk cipher, once a key unwrapped the data key.
    pub(crate) cipher: Option<ChunkCipher>,
    /// The tag table of an encrypted file.
    pub(crate) tags: Vec<u8>,
    /// The signature records of a signed file.
    pub(crate) signatures: Vec<SignatureRecord>,
    /// The signers whose signatures verified.
    pub(crate) signers: Vec<VerifyingKey>,
    /// Whether every read must be checked against the tensor's digest
    /// before it is returned (the caller asked for signatures or
    /// encryption, or the file is one of ours and signed).
    pub(crate) checked_reads: bool,
    /// A cryptotensors file: whether it is one, the names of the tensors
    /// it stores encrypted (from its header: no key needed), and its
    /// tensors' keys once a key unwrapped them.
    pub(crate) cryptotensors: bool,
    pub(crate) ct_encrypted: std::collections::BTreeSet<String>,
    pub(crate) ct: Option<crate::trust::cryptotensors::CtFile>,
}

fn err(kind: ErrorKind, path: &Path) -> Error {
    Error::new(kind, Some(path), DOING)
}

/// For a signed file, the signature records and the length of the file
/// without them; otherwise no records and the whole length.
pub(crate) fn split_signatures(
    file: &dyn ReadAt,
    file_len: u64,
    probe: &[u8],
    path: &Path,
) -> Result<(u64, Vec<SignatureRecord>)> {
    let signed = probe.starts_with(&MAGIC)
        && probe.get(12..16).is_some_and(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) & Flags::SIGNED.bits() != 0);
    if !signed {
        return Ok((file_len, Vec::new()));
    }
    let fmt = |e| Error::format(e, path, DOING);
    let mut trailer = vec![0u8; SIGNATURE_TRAILER_LEN.min(file_len) as usize];
    let at = file_len - trailer.len() as u64;
    read_exact_at(file, &mut trailer, at).map_err(|e| Error::io(e, path, DOING))?;
    let block_len = signature_block_len(&trailer, file_len).map_err(fmt)?;
    let body_len = file_len - block_len;
    let mut block = vec![0u8; block_len as usize];
    read_exact_at(file, &mut block, body_len).map_err(|e| Error::io(e, path, DOING))?;
    Ok((body_len, parse_signatures(&block).map_err(fmt)?))
}

/// Checks signatures, requirements, the tag table and, given a key, the
/// header MAC; returns what reads need, and for a sealed file opened with a
/// key, its head with the inner header.
pub(crate) fn check(
    file: &dyn ReadAt,
    path: &Path,
    head: &Head,
    signatures: Vec<SignatureRecord>,
    options: &ReadOptions,
) -> Result<(Trust, Option<Head>)> {
    let io = |e| Error::io(e, path, DOING);
    let ct = match head.header.format() {
        Format::Safetensors => Cryptotensors::from_header(&head.header).map_err(|e| Error::format(e, path, DOING))?,
        Format::Deathtensors | Format::Bintensors => None,
    };
    let encrypted = head.flags.contains(Flags::ENCRYPTED) || ct.is_some();
    if options.require_encryption && !encrypted {
        return Err(err(ErrorKind::NotEncrypted, path));
    }
    let mut trust = Trust {
        checked_reads: options.require_signature || options.require_encryption || !options.trusted_signers.is_empty(),
        cryptotensors: ct.is_some(),
        ct_encrypted: ct.as_ref().map(|c| c.tensors.keys().cloned().collect()).unwrap_or_default(),
        ..Trust::default()
    };
    if let Some(ct) = &ct {
        let opened = crate::trust::cryptotensors::open(
            ct,
            head,
            path,
            &options.keys,
            &options.trusted_signers,
            options.policy_input.as_ref(),
        )?;
        trust.ct = opened.file;
        trust.signers.extend(opened.signer);
    }
    // Everything before the blob (prefix, header, sealed header, tag table,
    // MAC, padding), read once: the signature, the tag table, the MAC and
    // the sealed header are all checked on these bytes.
    let mut front = Vec::new();
    if !signatures.is_empty() || head.tables.is_some() {
        front.resize(head.data_start as usize, 0);
        read_exact_at(file, &mut front, 0).map_err(io)?;
    }
    if !signatures.is_empty() {
        let footer = match head.footer() {
            Some((start, _)) => {
                let mut f = [0u8; 32];
                read_exact_at(file, &mut f, start).map_err(io)?;
                Some(f)
            }
            None => None,
        };
        let message = signed_message(&front[..head.header_end as usize], footer.as_ref());
        trust.signers = crate::trust::crypt::verify_signatures(&signatures, &message)
            .map_err(|k| err(ErrorKind::BadSignature { signer: k.fingerprint() }, path))?;
    }
    if (options.require_signature || !options.trusted_signers.is_empty()) && trust.signers.is_empty() {
        if let Some(ct) = &ct {
            // Signed (every cryptotensors file is), but only its public key checks it.
            let signer = format!("Ed25519 key {:?}", ct.sign.kid.as_deref().unwrap_or("(no key id)"));
            return Err(err(ErrorKind::SignerKeyNeeded { signer }, path));
        }
        return Err(err(ErrorKind::Unsigned, path));
    }
    if !options.trusted_signers.is_empty() && !trust.signers.iter().any(|s| options.trusted_signers.contains(s)) {
        let signers = trust.signers.iter().map(VerifyingKey::fingerprint).collect();
        return Err(err(ErrorKind::UntrustedSigner { signers }, path));
    }
    // Every tensor returned from a signed file of ours is checked against
    // the digest the signature commits to, encrypted or not (FORMAT 11.2):
    // tags do not bind a holder of the data key, since AEADs are not
    // key-committing. A cryptotensors signature commits to no digest of
    // the data: there is nothing more to check (docs/SECURITY.md).
    if !trust.signers.is_empty() && ct.is_none() {
        trust.checked_reads = true;
    }
    trust.signatures = signatures;
    let (Some(tables), Some(enc)) = (head.tables, head.header.encryption()) else {
        return Ok((trust, None));
    };
    // The tag table, the header MAC and the zero padding up to the blob.
    let (tags, mac) = (tables.tags.0 as usize..tables.tags.1 as usize, tables.mac.0 as usize..tables.mac.1 as usize);
    tables.check_padding(&front[mac.end..]).map_err(|e| Error::format(e, path, DOING))?;
    if crate::fs::hash::sha256(&front[tags.clone()]) != enc.tag_table_sha256 {
        return Err(err(ErrorKind::TagTableMismatch, path));
    }
    trust.tags = front[tags.clone()].to_vec();
    if options.keys.is_empty() {
        return Ok((trust, None));
    }
    let dk = unwrap_data_key(enc, &options.keys, options.max_kdf_work).map_err(|e| match e {
        crate::trust::crypt::UnwrapError::NoKey => err(ErrorKind::NoKey { recipients: recipients(head) }, path),
        crate::trust::crypt::UnwrapError::Failed => err(ErrorKind::Decrypt { what: "the data key".into() }, path),
        crate::trust::crypt::UnwrapError::Budget { needed, budget } => {
            err(ErrorKind::KdfBudget { needed, budget }, path)
        }
        crate::trust::crypt::UnwrapError::Tries(n) => err(
            ErrorKind::InvalidInput(format!(
                "{n} passphrases were tried without success, the most one open derives keys from (each costs \
                 an Argon2 derivation): the others given were not tried; give fewer"
            )),
            path,
        ),
    })?;
    // The MAC covers everything before it: prefix, header, padding, tags;
    // bit 3 (signed) is not covered: signing does not need the data key.
    let mut prefix = [0u8; 24];
    prefix.copy_from_slice(&front[..24]);
    let key = hmac::Key::new(hmac::HMAC_SHA256, &dk.derive(&enc.file_id, Label::HeaderMac)[..]);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(&deathtensors_format::mac_prefix(&prefix));
    ctx.update(&front[24..tags.end]);
    if !bool::from(ctx.sign().as_ref().ct_eq(&front[mac])) {
        return Err(err(ErrorKind::Decrypt { what: "the header".into() }, path));
    }
    let unsealed = match head.sealed {
        None => None,
        Some((start, end)) => {
            // The sealed header: inside the MAC's bytes, so already
            // authenticated; its own tag binds it to the file.
            let mut inner = front[start as usize..end as usize].to_vec();
            let n = inner.len() - TAG_LEN;
            let key = crate::trust::crypt::aead_key(enc.cipher, &dk.derive(&enc.file_id, Label::SealedHeader));
            let nonce = ring::aead::Nonce::assume_unique_for_key(deathtensors_format::sealed_nonce(&enc.nonce_salt));
            let aad = deathtensors_format::sealed_aad(&enc.file_id, n as u64);
            let tag = ring::aead::Tag::from(<[u8; TAG_LEN]>::try_from(&inner[n..]).unwrap_or([0; TAG_LEN]));
            let opened =
                key.open_in_place_separate_tag(nonce, ring::aead::Aad::from(&aad[..]), tag, &mut inner[..n], 0..);
            if opened.is_err() {
                return Err(err(ErrorKind::Decrypt { what: "the sealed header".into() }, path));
            }
            Some(head.unseal(&inner[..n], &options.limits).map_err(|e| Error::format(e, path, DOING))?)
        }
    };
    // The policy (in the header, the inner one if sealed) is evaluated once
    // the header is authenticated, and before any tensor can be decrypted:
    // if it refuses, the data key is dropped (and wiped) here.
    let header = unsealed.as_ref().map_or(&head.header, |h| &h.header);
    if let Some(rego) = header.metadata().and_then(|m| m.get(POLICY_KEY)) {
        crate::trust::policy::evaluate(rego, options.policy_input.as_ref())
            .map_err(|m| err(ErrorKind::PolicyDenied(m), path))?;
    }
    trust.cipher = Some(ChunkCipher::new(enc, &dk));
    Ok((trust, unsealed))
}

/// How the recipients of an encrypted file are named in errors.
pub(crate) fn recipients(head: &Head) -> Vec<String> {
    let Some(enc) = head.header.encryption() else { return Vec::new() };
    enc.recipients
        .iter()
        .map(|r| match r.kid() {
            Some(kid) => format!("{} key {kid:?}", r.kind()),
            None => "a passphrase".to_string(),
        })
        .collect()
}

/// Decrypts `buf.len()` bytes of tensor `index` starting `offset` bytes
/// into it, reading the ciphertext at `file_offset` (the tensor's start).
/// Whole chunks are read; chunks are spread over all cores when the range
/// spans several.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decrypt_range(
    file: &dyn ReadAt,
    path: &Path,
    head: &Head,
    trust: &Trust,
    index: usize,
    info: &TensorInfo,
    file_offset: u64,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let doing = "cannot read";
    let Some(cipher) = &trust.cipher else {
        return Err(Error::new(ErrorKind::NoKey { recipients: recipients(head) }, Some(path), doing));
    };
    let base = head.header.chunk_base(index).unwrap_or(0);
    if buf.is_empty() {
        if info.byte_len() > 0 {
            // An empty slice of a tensor: nothing to decrypt.
            return Ok(());
        }
        // An empty tensor: its one empty chunk authenticates its name,
        // dtype and shape.
        let t = (base as usize) * TAG_LEN;
        if !cipher.tensor(index, info).open(0, &mut [], &trust.tags[t..t + TAG_LEN]) {
            let what = format!("tensor {:?} chunk 0", info.name);
            return Err(Error::new(ErrorKind::Decrypt { what }, Some(path), doing));
        }
        return Ok(());
    }
    let len = info.byte_len();
    // A reader with requirements checks the ciphertext's signed digest, on
    // the very bytes it then decrypts: the tags alone do not bind a holder
    // of the data key (AEADs are not key-committing).
    if let (true, Some(expected)) = (trust.checked_reads, info.sha256.as_deref().copied()) {
        let whole = offset == 0 && buf.len() as u64 == len;
        let mut own = Vec::new();
        let target: &mut [u8] = if whole {
            buf
        } else {
            own.resize(len as usize, 0);
            &mut own
        };
        read_exact_at(file, target, file_offset).map_err(|e| Error::io(e, path, doing))?;
        let actual = crate::fs::hash::sha256(target);
        let opened = if actual != expected {
            target.fill(0);
            let kind = ErrorKind::TensorDigestMismatch { tensor: info.name.to_string(), expected, actual };
            Err(Error::new(kind, Some(path), doing))
        } else {
            open_chunks(cipher, trust, path, index, info, base, None, 0, target)
        };
        if !whole {
            match &opened {
                Ok(()) => buf.copy_from_slice(&own[offset as usize..offset as usize + buf.len()]),
                // Nothing of a tensor that failed its check.
                Err(_) => buf.fill(0),
            }
        }
        return opened;
    }
    open_chunks(cipher, trust, path, index, info, base, Some((file, file_offset)), offset, buf)
}

/// Decrypts the chunks of tensor `index` that `buf` (its bytes from
/// `offset`) covers: read from `source` (the file and the tensor's offset),
/// or, without one, already in `buf` as ciphertext (whole tensor).
#[allow(clippy::too_many_arguments)]
fn open_chunks(
    cipher: &ChunkCipher,
    trust: &Trust,
    path: &Path,
    index: usize,
    info: &TensorInfo,
    base: u64,
    source: Option<(&dyn ReadAt, u64)>,
    offset: u64,
    buf: &mut [u8],
) -> Result<()> {
    let doing = "cannot read";
    let size = cipher.chunk_size();
    let end = offset + buf.len() as u64;
    let first = offset / size;
    let last = (end - 1) / size;
    let work = |range: std::ops::Range<u64>, out: &mut [u8], out_start: u64| -> Result<()> {
        let mut chunks = cipher.tensor(index, info);
        let ranges = |j| chunks_range(info.byte_len(), size, j);
        each_chunk(range, out, out_start, (offset, end), ranges, |j, (cs, _), target| {
            if let Some((file, file_offset)) = source {
                read_exact_at(file, target, file_offset + cs).map_err(|e| Error::io(e, path, doing))?;
            }
            let t = ((base + j) as usize) * TAG_LEN;
            if !chunks.open(j, target, &trust.tags[t..t + TAG_LEN]) {
                let what = format!("tensor {:?} chunk {j}", info.name);
                return Err(Error::new(ErrorKind::Decrypt { what }, Some(path), doing));
            }
            Ok(())
        })
    };
    split_chunks(first, last, size, offset, end, buf, &work)
}

fn chunks_range(len: u64, size: u64, j: u64) -> (u64, u64) {
    deathtensors_format::chunk_range(len, size, j)
}

/// Decrypts every tensor of an encrypted deathtensors file into `buf` (the
/// whole blob, tensors at their offsets, gaps zeroed) in one pass over all
/// chunks, spread over all cores in runs balanced by bytes: no thread per
/// tensor. With checked reads, each tensor's ciphertext is hashed chunk by
/// chunk as it is read, before it is decrypted in place, and checked
/// against its digest at its last chunk (before the next is returned:
/// nothing is returned on a mismatch). `None` when the tensors are not listed in offset order (a file
/// from another writer): the caller then goes tensor by tensor.
pub(crate) fn decrypt_all(
    file: &dyn ReadAt,
    path: &Path,
    head: &Head,
    trust: &Trust,
    buf: &mut [u8],
) -> Option<Result<()>> {
    let doing = "cannot read";
    let tensors = head.header.tensors();
    if !tensors.windows(2).all(|w| w[0].data_offsets <= w[1].data_offsets) {
        return None;
    }
    let Some(cipher) = &trust.cipher else {
        return Some(Err(Error::new(ErrorKind::NoKey { recipients: recipients(head) }, Some(path), doing)));
    };
    let size = cipher.chunk_size();
    // Zero the gaps between tensors; every tensor byte is written below.
    let mut at = 0usize;
    for t in tensors {
        buf[at..t.data_offsets.0 as usize].fill(0);
        at = t.data_offsets.1 as usize;
    }
    buf[at..].fill(0);
    let checked = trust.checked_reads && head.header.has_tensor_digests();
    let result = {
        // Every chunk of every tensor, in file order.
        let units: Vec<(usize, u64)> = tensors
            .iter()
            .enumerate()
            .flat_map(|(i, t)| (0..deathtensors_format::chunk_count(t.byte_len(), size)).map(move |j| (i, j)))
            .collect();
        let threads = crate::fs::hash::threads().min(units.len()).max(1);
        let per = (head.header.data_len() / threads as u64).max(1);
        // Runs of whole chunks, cut where a run has its share of the bytes.
        let mut runs: Vec<(usize, usize, usize)> = Vec::new(); // (first unit, end unit, buffer start)
        let (mut first, mut start) = (0usize, 0usize);
        for (k, &(i, j)) in units.iter().enumerate() {
            let (_, ce) = chunks_range(tensors[i].byte_len(), size, j);
            let end = (tensors[i].data_offsets.0 + ce) as usize;
            let last_chunk = j + 1 == deathtensors_format::chunk_count(tensors[i].byte_len(), size);
            if runs.len() + 1 < threads && last_chunk && end - start >= per as usize {
                runs.push((first, k + 1, start));
                first = k + 1;
                start = end;
            }
        }
        runs.push((first, units.len(), start));
        let units = &units;
        std::thread::scope(|s| {
            let mut rest: &mut [u8] = &mut *buf;
            let mut handles = Vec::new();
            for (n, &(u0, u1, from)) in runs.iter().enumerate() {
                let to = runs.get(n + 1).map_or(head.header.data_len() as usize, |r| r.2);
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut(to - from);
                rest = tail;
                handles.push(s.spawn(move || -> Result<()> {
                    let run = Run { file, path, head, trust, cipher, from, checked };
                    // A run holds whole tensors: in the order they come.
                    let mut order: Vec<usize> = units[u0..u1].iter().map(|&(i, _)| i).collect();
                    order.dedup();
                    run.open(&order, mine)
                }));
            }
            handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })
    };
    if result.is_err() {
        // Nothing, not even what did verify, on an error.
        buf.fill(0);
    }
    Some(result)
}

/// One thread's share of [`decrypt_all`]: whole tensors, the blob's bytes
/// from `from` in its slice of the buffer.
struct Run<'a> {
    file: &'a dyn ReadAt,
    path: &'a Path,
    head: &'a Head,
    trust: &'a Trust,
    cipher: &'a ChunkCipher,
    from: usize,
    /// Whether each tensor is checked against its digest.
    checked: bool,
}

/// A tensor being read (hashed) and decrypted by one of the two lanes of
/// [`Run::open`].
struct Lane<'a> {
    i: usize,
    j: u64,
    chunks: crate::trust::crypt::TensorChunks<'a>,
}

impl Run<'_> {
    /// Reads and decrypts the tensors `order` (indices, whole, in this
    /// run's slice `mine`), two at a time: each tensor's chunks are read in
    /// order and decrypted in place; when `checked`, hashed first while they
    /// are in cache (two SHA-256 streams on this core, one a tensor), and a
    /// tensor whose ciphertext does not match its digest fails at its last
    /// chunk, before anything is returned.
    fn open(&self, order: &[usize], mine: &mut [u8]) -> Result<()> {
        let doing = "cannot read";
        let tensors = self.head.header.tensors();
        let size = self.cipher.chunk_size();
        let mut queue = order.iter().copied();
        let mut lanes: [Option<Lane<'_>>; 2] = [None, None];
        let mut hash = crate::fs::sha_lanes::TwoStreams::new();
        loop {
            for lane in &mut lanes {
                if lane.is_none() {
                    *lane = queue.next().map(|i| Lane { i, j: 0, chunks: self.cipher.tensor(i, &tensors[i]) });
                }
            }
            if lanes.iter().all(Option::is_none) {
                return Ok(());
            }
            // Each lane's chunk: where it is in `mine`, whether it ends its tensor.
            let spans: [Option<(usize, usize, bool)>; 2] = [0, 1].map(|k| {
                let lane = lanes[k].as_ref()?;
                let t = &tensors[lane.i];
                let (cs, ce) = lane.chunks.range(lane.j);
                let at = (t.data_offsets.0 + cs) as usize - self.from;
                let last = lane.j + 1 == deathtensors_format::chunk_count(t.byte_len(), size);
                Some((at, at + (ce - cs) as usize, last))
            });
            for (lane, span) in lanes.iter().zip(spans) {
                if let (Some(lane), Some((a, b, _))) = (lane, span) {
                    let t = &tensors[lane.i];
                    let offset = self.head.data_start + (self.from + a) as u64;
                    debug_assert!((self.from + a) as u64 >= t.data_offsets.0);
                    read_exact_at(self.file, &mut mine[a..b], offset).map_err(|e| Error::io(e, self.path, doing))?;
                }
            }
            // Whole chunks are whole blocks (chunk sizes are powers of two
            // from 4 KiB): fed together; a tensor's last chunk ends its stream.
            let whole = |k: usize| match spans[k] {
                Some((a, b, false)) => &mine[a..b],
                _ => &mine[..0],
            };
            if self.checked {
                hash.update(whole(0), whole(1));
            }
            for k in 0..2 {
                let (true, Some(lane), Some((a, b, true))) = (self.checked, &lanes[k], spans[k]) else { continue };
                let t = &tensors[lane.i];
                let actual = hash.finish(k, &mine[a..b]);
                if let Some(expected) = t.sha256.as_deref().copied().filter(|e| *e != actual) {
                    let kind = ErrorKind::TensorDigestMismatch { tensor: t.name.to_string(), expected, actual };
                    return Err(Error::new(kind, Some(self.path), doing));
                }
            }
            for k in 0..2 {
                let (Some(lane), Some((a, b, last))) = (&mut lanes[k], spans[k]) else { continue };
                let t = &tensors[lane.i];
                let base = self.head.header.chunk_base(lane.i).unwrap_or(0);
                let at = ((base + lane.j) as usize) * TAG_LEN;
                if !lane.chunks.open(lane.j, &mut mine[a..b], &self.trust.tags[at..at + TAG_LEN]) {
                    let what = format!("tensor {:?} chunk {}", t.name, lane.j);
                    return Err(Error::new(ErrorKind::Decrypt { what }, Some(self.path), doing));
                }
                lane.j += 1;
                if last {
                    lanes[k] = None;
                }
            }
        }
    }
}
