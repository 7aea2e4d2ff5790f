//! Writing encrypted files (`docs/FORMAT.md` section 10) in one pass: the
//! chunks are encrypted on all cores straight into an unnamed temp file,
//! their tags kept; then the header, which commits to the tags (and to the
//! ciphertext's digests with `checksum`), the tag table and the header MAC
//! are written in front, the footer and signatures after, and the file is
//! renamed over the target. Memory: the header, the tag table and one
//! buffer per core.

use std::path::Path;

use deathtensors_format::{chunk_count, Encryption, Flags, Head, Header, Label, TensorSpec, TAG_LEN};
use ring::hmac;

use crate::error::{Error, Result};
use crate::fs::atomic::TempFile;
use crate::fs::pread::write_all_at;
use crate::fs::writeback::Writeback;
use crate::options::WriteOptions;
use crate::trust::crypt::{new_file_keys, ChunkCipher, EncryptOptions};

const DOING: &str = "cannot write";

/// Bytes a worker gathers before one positioned write: tiny tensors are
/// written in batches, not one system call each.
const BATCH: usize = 4 << 20;

/// Encrypts `data` (in the order of `header`'s tensors) into `temp`, whose
/// blob starts at `data_start`; returns the tag table. Each worker hands
/// its run of the file to the disk as it goes when `durable`.
fn encrypt_blob(
    temp: &TempFile,
    header: &Header,
    data: &[&[u8]],
    cipher: &ChunkCipher,
    data_start: u64,
    durable: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> std::io::Result<Vec<u8>> {
    let tensors = header.tensors();
    let size = cipher.chunk_size();
    // Global chunk g belongs to tensor owner[g]; chunks are numbered as in
    // the tag table (tensors in header order, which is offset order here).
    let mut owner: Vec<(u32, u64)> = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        for j in 0..chunk_count(t.byte_len(), size) {
            owner.push((i as u32, j));
        }
    }
    let mut tags = vec![0u8; owner.len() * TAG_LEN];
    let threads = crate::fs::hash::threads().min(owner.len()).max(1);
    // Balance the runs by bytes, not by chunk count.
    let total: u64 = header.data_len().max(1);
    let mut cuts = vec![0usize];
    let mut acc = 0u64;
    for (g, &(i, j)) in owner.iter().enumerate() {
        let t = &tensors[i as usize];
        let (s, e) = deathtensors_format::chunk_range(t.byte_len(), size, j);
        acc += (e - s).max(1);
        if cuts.len() < threads && acc * threads as u64 >= total * cuts.len() as u64 && g + 1 < owner.len() {
            cuts.push(g + 1);
        }
    }
    cuts.push(owner.len());
    let owner = &owner;
    std::thread::scope(|s| {
        let mut rest: &mut [u8] = &mut tags;
        let mut handles = Vec::new();
        for w in cuts.windows(2) {
            let (g0, g1) = (w[0], w[1]);
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut((g1 - g0) * TAG_LEN);
            rest = tail;
            handles.push(s.spawn(move || -> std::io::Result<()> {
                let mut buf: Vec<u8> = Vec::with_capacity(BATCH + size as usize);
                let mut writeback = Writeback::new(durable);
                // File offset of buf[0].
                let mut buf_at: Option<u64> = None;
                let mut chunks = None;
                let mut chunks_of = u32::MAX;
                for (k, &(i, j)) in owner[g0..g1].iter().enumerate() {
                    let t = &tensors[i as usize];
                    if chunks_of != i {
                        chunks = Some(cipher.tensor(i as usize, t));
                        chunks_of = i;
                    }
                    let c = chunks.as_mut().expect("set above");
                    let (cs, ce) = c.range(j);
                    let at = data_start + t.data_offsets.0 + cs;
                    let start = *buf_at.get_or_insert(at);
                    // Alignment gaps between tensors are written as zeros.
                    let pos = (at - start) as usize;
                    buf.resize(pos, 0);
                    buf.extend_from_slice(&data[i as usize][cs as usize..ce as usize]);
                    let tag = c.seal(j, &mut buf[pos..]);
                    mine[k * TAG_LEN..(k + 1) * TAG_LEN].copy_from_slice(&tag);
                    progress(ce - cs);
                    if buf.len() >= BATCH {
                        writeback.write_at(temp.file(), &buf, start)?;
                        buf.clear();
                        buf_at = None;
                    }
                }
                if let Some(start) = buf_at {
                    writeback.write_at(temp.file(), &buf, start)?;
                }
                Ok(())
            }));
        }
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })?;
    Ok(tags)
}

/// Saves `specs` with their `data` encrypted as `enc` says (deathtensors only).
pub(crate) fn save_encrypted(
    path: &Path,
    specs: Vec<TensorSpec>,
    data: &[&[u8]],
    options: &WriteOptions,
    enc: &EncryptOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Header> {
    let fmt = |e| Error::format(e, path, DOING);
    let io = |e| Error::io(e, path, DOING);
    crate::options::check_encryption(enc, path)?;
    options.check_footer("encrypted", path)?;
    let plain = options.deathtensors_header(specs).map_err(fmt)?;
    let keys = new_file_keys(enc).map_err(|m| Error::input(m, path, DOING))?;
    let (dk, file_id) = (&keys.data_key, keys.file_id);
    let total: u64 = plain.tensors().iter().map(|t| chunk_count(t.byte_len(), enc.chunk_size)).sum();
    let mut section = Encryption {
        cipher: enc.cipher,
        chunk_size: enc.chunk_size,
        file_id,
        nonce_salt: keys.nonce_salt,
        tag_table_len: total * TAG_LEN as u64,
        tag_table_sha256: [0; 32],
        recipients: keys.recipients.clone(),
        sealed_header: None,
    };
    let mut flags = Flags::ENCRYPTED;
    // A signed file carries the digests of its ciphertext: AEAD tags do not
    // bind a holder of the data key, who could forge a chunk under the same
    // tag; the signed digests do. The footer is written only when asked for:
    // the signature already commits to every tensor byte and to the tags.
    let checksum = options.checksum || !options.signers.is_empty();
    if options.checksum {
        flags = flags | Flags::CHECKSUM;
    }
    if !options.signers.is_empty() {
        flags = flags | Flags::SIGNED;
    }
    if enc.seal_header {
        flags = flags | Flags::SEALED;
    }
    // Placeholders of the final length: digests are fixed-length hex.
    let mut placeholder_specs: Vec<TensorSpec> = plain.tensors().iter().map(|t| t.to_spec()).collect();
    if checksum {
        for s in &mut placeholder_specs {
            s.sha256 = Some([0; 32]);
        }
    }
    let rebuild = |specs: Vec<TensorSpec>, section: Encryption| -> Result<Header> {
        options.deathtensors_header(specs).and_then(|h| h.with_encryption(section)).map_err(fmt)
    };
    if enc.seal_header {
        // The inner header's length does not depend on the section, and
        // placeholder digests have the length of real ones.
        let probe = rebuild(placeholder_specs.clone(), section.clone())?;
        section.sealed_header = Some(Head::sealed_json_len(&probe) as u64);
    }
    let encode = |header: &Header| -> Result<(Vec<u8>, Vec<u8>)> {
        if enc.seal_header {
            Head::encode_sealed(header, flags).map_err(fmt)
        } else {
            Ok((Head::encode(header, flags).map_err(fmt)?, Vec::new()))
        }
    };
    let header = rebuild(placeholder_specs.clone(), section.clone())?;
    let head_len = encode(&header)?.0.len() as u64;
    let tables = Head::tables_for(&header, head_len).map_err(fmt)?.expect("the header is encrypted");
    let cipher = ChunkCipher::new(&section, dk);

    let temp = TempFile::for_write(path, options).map_err(io)?;
    let data_end = tables.data_start + header.data_len();
    // The padding and gaps read as zeros.
    temp.file().set_len(data_end).map_err(io)?;
    let tags = encrypt_blob(&temp, &header, data, &cipher, tables.data_start, options.durable, progress).map_err(io)?;
    section.tag_table_sha256 = crate::fs::hash::sha256(&tags);
    if checksum {
        // The digests of the ciphertext, read back from the page cache on all cores.
        let inputs: Vec<_> = header
            .tensors()
            .iter()
            .map(|t| crate::fs::sha_lanes::Input::File {
                file: temp.file(),
                offset: tables.data_start + t.data_offsets.0,
                len: t.byte_len(),
            })
            .collect();
        let digests = crate::fs::sha_lanes::digests(&inputs).map_err(io)?;
        for (s, d) in placeholder_specs.iter_mut().zip(digests) {
            s.sha256 = Some(d);
        }
    }
    let header = rebuild(placeholder_specs, section.clone())?;
    let (mut head, inner) = encode(&header)?;
    if head.len() as u64 != head_len || inner.len() as u64 != section.sealed_header.unwrap_or(0) {
        return Err(Error::input("internal error: the header changed length", path, DOING));
    }
    if enc.seal_header {
        // The sealed header follows the outer one: one AEAD message.
        let key = crate::trust::crypt::aead_key(enc.cipher, &dk.derive(&file_id, Label::SealedHeader));
        let nonce = ring::aead::Nonce::assume_unique_for_key(deathtensors_format::sealed_nonce(&keys.nonce_salt));
        let aad = deathtensors_format::sealed_aad(&file_id, inner.len() as u64);
        let mut sealed = inner;
        let tag = key
            .seal_in_place_separate_tag(nonce, ring::aead::Aad::from(&aad[..]), &mut sealed)
            .map_err(|_| Error::input("the header is too long to seal", path, DOING))?;
        sealed.extend_from_slice(tag.as_ref());
        // From here on `head` is everything before the tag table.
        head.extend_from_slice(&sealed);
    }
    let mac_key = hmac::Key::new(hmac::HMAC_SHA256, &dk.derive(&file_id, Label::HeaderMac)[..]);
    let mut mac = hmac::Context::with_key(&mac_key);
    let mut prefix = [0u8; 24];
    prefix.copy_from_slice(&head[..24]);
    mac.update(&deathtensors_format::mac_prefix(&prefix));
    mac.update(&head[24..]);
    mac.update(&tags);
    write_all_at(temp.file(), &head, 0).map_err(io)?;
    write_all_at(temp.file(), &tags, tables.tags.0).map_err(io)?;
    write_all_at(temp.file(), mac.sign().as_ref(), tables.mac.0).map_err(io)?;
    crate::file::signing::finish(&temp, path, &head, data_end, flags, options)?;
    temp.persist().map_err(io)?;
    Ok(header)
}
