//! Streaming, atomic, deterministic writes.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use deathtensors_format::{Flags, Format, Head, Header, Limits, TensorSpec};

use crate::error::{Error, Result};
use crate::fs::atomic::TempFile;
use crate::fs::direct::Direct;
use crate::fs::hash::{self, Hasher};
use crate::fs::pread::{read_exact_at, write_all_at};
use crate::fs::sha_lanes::sha256_views;
use crate::fs::strided::TensorBytes;
use crate::fs::writeback::{Sequential, Writeback};
use crate::options::{Compress, WriteOptions};

const DOING: &str = "cannot write";

/// Lays out the header for `specs`.
fn plan(path: &Path, specs: Vec<TensorSpec>, options: &WriteOptions) -> Result<(Header, Flags)> {
    if let Some(why) = options.broken_rule() {
        return Err(Error::input(why, path, DOING));
    }
    let fmt = |e| Error::format(e, path, DOING);
    match options.format {
        Format::Deathtensors => {
            let header = options.deathtensors_header(specs).map_err(fmt)?;
            let mut flags = if options.writes_footer() { Flags::CHECKSUM } else { Flags::EMPTY };
            if !options.signers.is_empty() {
                flags = flags | Flags::SIGNED;
            }
            Ok((header, flags))
        }
        Format::Safetensors => {
            options.check_plain("safetensors", path)?;
            let header = Header::new_safetensors(specs, options.metadata.clone(), &options.limits).map_err(fmt)?;
            Ok((header, Flags::EMPTY))
        }
        Format::Bintensors => {
            options.check_plain("bintensors", path)?;
            // `metadata: None` is written as bintensors' "no metadata"
            // (0x00), an empty map as an empty map (0x01 0x00): two files.
            let header = Header::new_bintensors(specs, options.metadata.clone(), &options.limits).map_err(fmt)?;
            Ok((header, Flags::EMPTY))
        }
    }
}

/// Zero bytes for alignment gaps (gaps are shorter than the alignment).
fn zeros<'a>(n: u64) -> impl Iterator<Item = &'a [u8]> {
    static ZEROS: [u8; 4096] = [0; 4096];
    let mut left = n;
    std::iter::from_fn(move || {
        (left > 0).then(|| {
            let k = left.min(ZEROS.len() as u64);
            left -= k;
            &ZEROS[..k as usize]
        })
    })
}

/// Saves tensors to `path` atomically, streaming each tensor's bytes from
/// the caller's buffer to the file: memory use is the header plus a 1 MiB
/// buffer, whatever the size of the tensors.
///
/// With `checksum`, the per-tensor digests are computed first on all cores,
/// two streams per core (the header that contains them comes first in the
/// file), then the footer is hashed on another thread while the file is
/// written. Without the footer (and unsigned), the digests are computed on
/// all cores while the data is written behind a header of placeholders,
/// which the real header (of the same length) then overwrites.
///
/// Returns the header written. Same tensors and options, same bytes.
///
/// # Errors
/// - `InvalidInput` if a buffer's length does not match its spec, or for
///   checksums in safetensors.
/// - `Format` if the specs are invalid (names, duplicates, sizes, limits).
/// - `Io` if the file cannot be written; the target is then untouched and
///   no temp file remains.
pub fn save(path: impl AsRef<Path>, tensors: Vec<(TensorSpec, &[u8])>, options: &WriteOptions) -> Result<Header> {
    save_views(path, tensors.into_iter().map(|(s, b)| (s, TensorBytes::Contiguous(b))).collect(), options)
}

/// [`save`], telling `progress` the bytes of tensor data encrypted as it
/// goes (from any thread), for an encrypted file: what a progress bar
/// needs (their sum is the tensors' bytes). Other files are saved as by
/// [`save`], and `progress` is told their bytes once they are written.
///
/// # Errors
/// As [`save`].
pub fn save_with_progress(
    path: impl AsRef<Path>,
    tensors: Vec<(TensorSpec, &[u8])>,
    options: &WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Header> {
    let total = tensors.iter().map(|(_, b)| b.len() as u64).sum();
    let views = tensors.into_iter().map(|(s, b)| (s, TensorBytes::Contiguous(b))).collect();
    let header = save_views_with(path.as_ref(), views, options, progress)?;
    if !encrypts_in_chunks(options) {
        progress(total);
    }
    Ok(header)
}

/// Whether a save goes through the encrypted writer, which reports its
/// progress chunk by chunk (a compressed save encrypts in `pack.rs`).
fn encrypts_in_chunks(options: &WriteOptions) -> bool {
    options.encryption.is_some() && options.format == Format::Deathtensors && options.compress == Compress::Off
}

/// `InvalidInput` if a buffer's length does not match its spec.
fn check_lengths(specs: &[TensorSpec], lens: impl Iterator<Item = usize>, path: &Path) -> Result<()> {
    for (spec, len) in specs.iter().zip(lens) {
        let want = spec.byte_len().map_err(|e| Error::format(e, path, DOING))?;
        if len as u64 != want {
            return Err(Error::input(
                format!("tensor {:?}: {len} bytes given, its dtype and shape need {want}", spec.name),
                path,
                DOING,
            ));
        }
    }
    Ok(())
}

/// [`save`] of tensors given as [`TensorBytes`]: a slice each, or strided
/// runs (rows of a view of a larger tensor), written and hashed where they
/// are, without a contiguous copy. Compressed and encrypted files take each
/// strided tensor copied into one buffer first. The file is the same as
/// [`save`] of the same bytes made contiguous.
///
/// # Errors
/// As [`save`].
pub fn save_views(
    path: impl AsRef<Path>,
    tensors: Vec<(TensorSpec, TensorBytes<'_>)>,
    options: &WriteOptions,
) -> Result<Header> {
    save_views_with(path.as_ref(), tensors, options, &|_| {})
}

/// [`save_views`], telling the encrypted writer's `progress` its chunks.
fn save_views_with(
    path: &Path,
    tensors: Vec<(TensorSpec, TensorBytes<'_>)>,
    options: &WriteOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Header> {
    let (mut specs, data): (Vec<TensorSpec>, Vec<TensorBytes<'_>>) = tensors.into_iter().unzip();
    // Check lengths before any hashing.
    check_lengths(&specs, data.iter().map(TensorBytes::len), path)?;
    let encrypted = options.encryption.is_some() && options.format == Format::Deathtensors;
    if options.compress != Compress::Off || encrypted {
        // These writers take each tensor as one slice: strided tensors are
        // copied into one first.
        let owned: Vec<_> = data.iter().map(TensorBytes::to_cow).collect();
        let slices: Vec<&[u8]> = owned.iter().map(|b| &**b).collect();
        match options.compress {
            Compress::Chunked { level } => {
                return crate::file::pack::save_chunked(
                    path,
                    specs,
                    crate::file::pack::Source::Slices(&slices),
                    options,
                    level,
                );
            }
            Compress::Blob { level } => {
                return crate::file::pack::save_blob(
                    path,
                    specs,
                    crate::file::pack::Source::Slices(&slices),
                    options,
                    level,
                );
            }
            Compress::Off => {}
        }
        if let Some(enc) = &options.encryption {
            return crate::file::seal::save_encrypted(path, specs, &slices, options, enc, progress);
        }
    }
    // Per-tensor digests with nothing over the header (no footer, no
    // signature) are computed while the data is written, behind a header
    // whose digests are placeholders of the same length, written over at
    // the end: while a durable write waits for the disk, the hashing takes
    // the cores it leaves idle (a checkpoint's rank files).
    let digests_later = options.checksum && options.format == Format::Deathtensors && !options.writes_footer();
    if digests_later {
        for spec in &mut specs {
            spec.sha256 = Some([0; 32]);
        }
    } else if options.checksum || (!options.signers.is_empty() && options.format == Format::Deathtensors) {
        for (spec, d) in specs.iter_mut().zip(sha256_views(&data)) {
            spec.sha256 = Some(d);
        }
    }
    // deathtensors keeps the given order; safetensors and bintensors sort,
    // so remember the names to find each tensor's bytes again.
    let names: Vec<String> = match options.format {
        Format::Deathtensors => Vec::new(),
        Format::Safetensors | Format::Bintensors => specs.iter().map(|s| s.name.clone()).collect(),
    };
    let (header, flags) = plan(path, specs, options)?;
    let head = Head::encode(&header, flags).map_err(|e| Error::format(e, path, DOING))?;
    let mut ordered: Vec<TensorBytes<'_>> = data.clone();
    if !names.is_empty() {
        for (name, bytes) in names.iter().zip(&data) {
            if let Some(pos) = header.position(name) {
                ordered[pos] = *bytes;
            }
        }
    }

    // The file's pieces in order: head, then each tensor after its padding.
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(1 + 2 * header.len());
    pieces.push(&head);
    let mut offset = 0u64;
    for (k, t) in header.tensors().iter().enumerate() {
        pieces.extend(zeros(t.data_offsets.0 - offset));
        pieces.extend(ordered[k].runs());
        offset = t.data_offsets.1;
    }
    let pieces = &pieces;

    let temp = TempFile::for_write(path, options).map_err(|e| Error::io(e, path, DOING))?;
    let write = || -> std::io::Result<()> {
        // drop_cache: around the page cache, where the file system allows.
        if let Some(mut out) = Direct::for_write(temp.file(), options) {
            for piece in pieces {
                out.write_all(piece)?;
            }
            return out.finish().map(drop);
        }
        let mut out = BufWriter::with_capacity(1 << 20, Sequential::for_write(temp.file(), options, 0));
        for piece in pieces {
            out.write_all(piece)?;
        }
        out.flush()
    };
    if flags.contains(Flags::CHECKSUM) {
        let (written, footer) = std::thread::scope(|s| {
            let hasher = s.spawn(|| {
                let mut h = Hasher::new();
                // The footer covers everything after the 24-byte prefix.
                h.update(&pieces[0][24..]);
                for piece in &pieces[1..] {
                    h.update(piece);
                }
                h.finish()
            });
            let written = write();
            (written, hasher.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        });
        written.map_err(|e| Error::io(e, path, DOING))?;
        let mut f = temp.file();
        f.write_all(&footer).map_err(|e| Error::io(e, path, DOING))?;
        if flags.contains(Flags::SIGNED) {
            let block = crate::file::signing::signature_block(&options.signers, &head, Some(&footer))
                .map_err(|e| Error::format(e, path, DOING))?;
            f.write_all(&block).map_err(|e| Error::io(e, path, DOING))?;
        }
    } else if digests_later {
        let (written, digests) = std::thread::scope(|s| {
            let hashing = s.spawn(|| sha256_views(&data));
            let written = write();
            (written, hashing.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        });
        written.map_err(|e| Error::io(e, path, DOING))?;
        // deathtensors keeps the caller's order: the header's is `data`'s.
        let (header, _) = write_digests(path, &temp, &header, &digests, flags, &options.limits)?;
        temp.persist().map_err(|e| Error::io(e, path, DOING))?;
        return Ok(header);
    } else {
        write().map_err(|e| Error::io(e, path, DOING))?;
    }
    temp.persist().map_err(|e| Error::io(e, path, DOING))?;
    Ok(header)
}

/// Writes over the placeholder head of `header` (a deathtensors file
/// written with zero digests) the head with `digests` (in header order),
/// and returns the header they make. The two heads have the same length (a
/// digest is 64 hex digits either way); `limits` are the ones the header
/// was planned under. Returns the new header and its head.
fn write_digests(
    path: &Path,
    temp: &TempFile,
    header: &Header,
    digests: &[[u8; 32]],
    flags: Flags,
    limits: &Limits,
) -> Result<(Header, Vec<u8>)> {
    let fmt = |e| Error::format(e, path, DOING);
    let placeholder = Head::encode(header, flags).map_err(fmt)?.len();
    let specs =
        header.tensors().iter().zip(digests).map(|(t, d)| TensorSpec { sha256: Some(*d), ..t.to_spec() }).collect();
    let header = Header::new_deathtensors(
        specs,
        header.metadata().cloned().unwrap_or_default(),
        header.alignment(),
        header.created_by().map(str::to_string),
        limits,
    )
    .map_err(fmt)?;
    let head = Head::encode(&header, flags).map_err(fmt)?;
    if head.len() != placeholder {
        return Err(Error::input(
            format!("the header with digests is {} bytes, its placeholder was {placeholder}", head.len()),
            path,
            DOING,
        ));
    }
    write_all_at(temp.file(), &head, 0).map_err(|e| Error::io(e, path, DOING))?;
    Ok((header, head))
}

/// Saves tensors whose bytes `fill(name, offset, buf)` produces, streaming
/// with bounded memory, compressed as `options.compress` says (a conversion
/// reads another file through it). Tensors are written in the order of
/// `specs`.
///
/// # Errors
/// As [`crate::save`], and whatever `fill` returns.
pub fn save_from(
    path: impl AsRef<Path>,
    specs: Vec<TensorSpec>,
    options: &WriteOptions,
    fill: impl Fn(&str, u64, &mut [u8]) -> Result<()> + Sync,
) -> Result<Header> {
    let path = path.as_ref();
    let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
    let by_index = |i: usize, offset: u64, buf: &mut [u8]| fill(&names[i], offset, buf);
    match options.compress {
        Compress::Chunked { level } => {
            crate::file::pack::save_chunked(path, specs, crate::file::pack::Source::Fill(&by_index), options, level)
        }
        Compress::Blob { level } => {
            crate::file::pack::save_blob(path, specs, crate::file::pack::Source::Fill(&by_index), options, level)
        }
        Compress::Off => {
            let mut writer = Writer::create(path, specs, options)?;
            for name in &names {
                writer.write_tensor_with(name, hash::CHUNK * 8, |offset, buf| fill(name, offset, buf))?;
            }
            writer.finish()?;
            // The header as written, digests included.
            Ok(crate::file::reader::Reader::open(path)?.header().clone())
        }
    }
}

/// An incremental writer, for callers that produce tensors one at a time:
/// the specs are known up front, the bytes come later, in any order, each
/// tensor once.
///
/// Nothing is visible at `path` until [`Writer::finish`] succeeds; a writer
/// dropped before that leaves the target untouched and no temp file.
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    temp: TempFile,
    writeback: Writeback,
    header: Header,
    flags: Flags,
    data_start: u64,
    written: Vec<bool>,
    /// Whether each tensor's digest goes into the header.
    hashing: bool,
    digests: Vec<[u8; 32]>,
    /// The limits the header was planned under (and is again, digests in).
    limits: Limits,
}

impl Writer {
    /// Starts writing a file for `specs`.
    ///
    /// # Errors
    /// As [`save`].
    pub fn create(path: impl AsRef<Path>, mut specs: Vec<TensorSpec>, options: &WriteOptions) -> Result<Writer> {
        let path = path.as_ref();
        options.check_incremental(path)?;
        if options.checksum {
            // Placeholders of the same length: the real digests replace them
            // in place at `finish`.
            for s in &mut specs {
                s.sha256 = Some([0; 32]);
            }
        }
        let (header, flags) = plan(path, specs, options)?;
        let head = Head::encode(&header, flags).map_err(|e| Error::format(e, path, DOING))?;
        let temp = TempFile::for_write(path, options).map_err(|e| Error::io(e, path, DOING))?;
        let io = |e| Error::io(e, path, DOING);
        write_all_at(temp.file(), &head, 0).map_err(io)?;
        let data_start = head.len() as u64;
        // Gaps read as zeros (sparse where the filesystem allows).
        temp.file().set_len(data_start + header.data_len()).map_err(io)?;
        let n = header.len();
        Ok(Writer {
            path: path.to_path_buf(),
            temp,
            writeback: Writeback::for_write(options),
            header,
            flags,
            data_start,
            written: vec![false; n],
            hashing: options.checksum,
            digests: vec![[0; 32]; n],
            limits: options.limits.clone(),
        })
    }

    /// The header being written (tensor order and offsets).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Writes the bytes of the tensor `name`.
    ///
    /// # Errors
    /// `InvalidInput` for an unknown name, a tensor written twice, or a
    /// length that does not match; `Io`.
    pub fn write_tensor(&mut self, name: &str, bytes: &[u8]) -> Result<()> {
        let path = &self.path;
        let i = self
            .header
            .position(name)
            .ok_or_else(|| Error::input(format!("no tensor {name:?} in the specs"), path, DOING))?;
        let info = &self.header.tensors()[i];
        if self.written[i] {
            return Err(Error::input(format!("tensor {name:?} written twice"), path, DOING));
        }
        if bytes.len() as u64 != info.byte_len() {
            return Err(Error::input(
                format!("tensor {name:?}: {} bytes given, its dtype and shape need {}", bytes.len(), info.byte_len()),
                path,
                DOING,
            ));
        }
        self.writeback
            .write_at(self.temp.file(), bytes, self.data_start + info.data_offsets.0)
            .map_err(|e| Error::io(e, path, DOING))?;
        if self.hashing {
            self.digests[i] = hash::sha256(bytes);
        }
        self.written[i] = true;
        Ok(())
    }

    /// Writes the tensor `name` in chunks of at most `chunk` bytes that
    /// `fill(offset, buf)` produces, so that memory stays bounded whatever
    /// the tensor's size (conversions stream through it).
    ///
    /// # Errors
    /// As [`Writer::write_tensor`], and whatever `fill` returns.
    pub fn write_tensor_with(
        &mut self,
        name: &str,
        chunk: usize,
        mut fill: impl FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let path = &self.path;
        let i = self
            .header
            .position(name)
            .ok_or_else(|| Error::input(format!("no tensor {name:?} in the specs"), path, DOING))?;
        if self.written[i] {
            return Err(Error::input(format!("tensor {name:?} written twice"), path, DOING));
        }
        let info = &self.header.tensors()[i];
        let (start, len) = (self.data_start + info.data_offsets.0, info.byte_len());
        let mut buf = vec![0u8; (len.min(chunk.max(1) as u64)) as usize];
        let mut hasher = self.hashing.then(Hasher::new);
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            fill(done, &mut buf[..n])?;
            self.writeback
                .write_at(self.temp.file(), &buf[..n], start + done)
                .map_err(|e| Error::io(e, path, DOING))?;
            if let Some(h) = &mut hasher {
                h.update(&buf[..n]);
            }
            done += n as u64;
        }
        if let Some(h) = hasher {
            self.digests[i] = h.finish();
        }
        self.written[i] = true;
        Ok(())
    }

    /// Completes the file and moves it over the target.
    ///
    /// # Errors
    /// `InvalidInput` if a tensor was not written; `Io`.
    pub fn finish(self) -> Result<()> {
        let path = &self.path;
        let io = |e| Error::io(e, path, DOING);
        if let Some(i) = self.written.iter().position(|w| !w) {
            let name = &self.header.tensors()[i].name;
            return Err(Error::input(format!("tensor {name:?} was never written"), path, DOING));
        }
        if !self.hashing {
            return self.temp.persist().map_err(io);
        }
        let (header, head) = write_digests(path, &self.temp, &self.header, &self.digests, self.flags, &self.limits)?;
        if self.flags.contains(Flags::CHECKSUM) {
            // The footer covers the final header and the data: hash it back
            // from the file (page cache).
            let mut h = Hasher::new();
            h.update(&head[24..]);
            let mut buf = vec![0u8; hash::CHUNK];
            let end = self.data_start + header.data_len();
            let mut at = self.data_start;
            while at < end {
                let n = (end - at).min(buf.len() as u64) as usize;
                read_exact_at(self.temp.file(), &mut buf[..n], at).map_err(io)?;
                h.update(&buf[..n]);
                at += n as u64;
            }
            write_all_at(self.temp.file(), &h.finish(), end).map_err(io)?;
        }
        self.temp.persist().map_err(io)
    }
}
