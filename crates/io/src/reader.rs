//! Opening files lazily and reading tensors.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use deathtensors_format::{Format, Head, Header, Limits, TensorInfo, FOOTER_LEN, PROBE_LEN};

use crate::crypt::VerifyingKey;
use crate::error::{Error, ErrorKind, Result};
use crate::fork::Threads;
use crate::hash::{self, sha256_file_range};
use crate::mmap::Mmap;
use crate::options::ReadOptions;
use crate::pread::{read_exact_at, ReadAt, Source};
use crate::sha_lanes::Input;
use crate::trust::{self, Trust};

/// An open deathtensors, safetensors or bintensors file.
///
/// Opening reads and validates only the head of the file (prefix and
/// header): its cost depends on the header, not on the file size. Tensor
/// bytes are read when asked for: owned copies through positioned reads
/// ([`Reader::read`]), or borrowed from a mapping ([`Reader::bytes`], when
/// opened with [`Reader::open_mmap`]).
#[derive(Debug)]
pub struct Reader {
    path: PathBuf,
    /// The file, or another source of its bytes (a remote object).
    file: Source,
    file_len: u64,
    head: Head,
    /// Whether the caller of `open_mmap` allowed mapping (its safety
    /// contract), and the mapping, made on first zero-copy access.
    mappable: bool,
    map: OnceLock<std::result::Result<Mmap, String>>,
    /// The decompressed blob of a zstd file, made on first use.
    blob: OnceLock<std::result::Result<Vec<u8>, String>>,
    options: ReadOptions,
    /// Signatures, the tag table and the chunk cipher.
    trust: Trust,
}

/// A tensor's description and where its bytes are in the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// The header's entry for the tensor.
    pub info: &'a TensorInfo,
    /// The file offset of its first byte (of the decompressed blob's start
    /// plus offset, for compressed files).
    pub file_offset: u64,
}

impl TensorRef<'_> {
    /// Whether the tensor's bytes sit at an address aligned for its dtype
    /// (in a mapping, which starts page-aligned). Files by deathtensors 0.3.0
    /// pack tensors with no padding: an F32 after a 3-byte BOOL is not
    /// aligned, and must be copied (or read unaligned) before use as `f32`s.
    pub fn is_aligned(&self) -> bool {
        self.file_offset.is_multiple_of(self.info.dtype.align())
    }
}

/// Fills `buf` from `file` at `offset`; large reads are split over all
/// cores, so that the kernel's copies run in parallel (one thread copies
/// from the page cache at ~3.5 GB/s here). Worth it for buffers backed by
/// huge pages (the Python arena); with small pages the threads contend on
/// page faults instead.
pub(crate) fn read_parallel(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    // Below this, one thread is as fast as several.
    const PARALLEL_MIN: usize = 16 << 20;
    let threads = if buf.len() < PARALLEL_MIN { 1 } else { hash::threads() };
    if threads == 1 {
        return read_exact_at(file, buf, offset);
    }
    let chunk = buf.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, part)| s.spawn(move || read_exact_at(file, part, offset + (i * chunk) as u64)))
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

pub(crate) fn read_head(file: &File, file_len: u64, path: &Path, limits: &Limits) -> Result<Head> {
    read_head_from(file, None, file_len, path, limits, None)
}

/// Heads at least this long are parsed straight from the file's mapping when
/// the caller maps it anyway: copying them out costs a fresh page per 4 KiB
/// (2-4 µs each on a VM; ~1 ms for a 20,000-tensor header), the mapping's
/// pages are the page cache's.
const MAPPED_HEAD_MIN: u64 = 256 << 10;

/// [`read_head`], parsing from the file's mapping when the head is long
/// enough for it to matter and `map` is given (then the mapping is made and
/// kept there, for a reader opened with `open_mmap`).
fn read_head_from(
    file: &dyn ReadAt,
    local: Option<&File>,
    file_len: u64,
    path: &Path,
    limits: &Limits,
    map: Option<&OnceLock<std::result::Result<Mmap, String>>>,
) -> Result<Head> {
    let doing = "cannot open";
    let mut probe = vec![0u8; (PROBE_LEN as u64).min(file_len) as usize];
    read_exact_at(file, &mut probe, 0).map_err(|e| Error::io(e, path, doing))?;
    let needed = Head::needed(&probe, limits).map_err(|e| Error::format(e, path, doing))?;
    if needed > file_len {
        let e = deathtensors_format::Head::parse(&probe, file_len, limits).err();
        if let Some(e) = e {
            return Err(Error::format(e, path, doing));
        }
    }
    if let (Some(map), Some(local)) = (map.filter(|_| needed >= MAPPED_HEAD_MIN), local) {
        // SAFETY: `map` is given only for `open_mmap` readers, whose caller
        // took on the contract of `Mmap::map`. A mapping that fails here is
        // made again (and its error reported) on first use.
        if let Ok(m) = unsafe { Mmap::map(local) } {
            let _ = map.set(Ok(m));
        }
        if let Some(bytes) = map.get().and_then(|m| m.as_ref().ok()).and_then(|m| m.bytes().get(..needed as usize)) {
            return Head::parse_with(bytes, file_len, limits, &Threads::default())
                .map_err(|e| Error::format(e, path, doing));
        }
    }
    let mut head = vec![0u8; needed as usize];
    read_exact_at(file, &mut head, 0).map_err(|e| Error::io(e, path, doing))?;
    Head::parse_with(&head, file_len, limits, &Threads::default()).map_err(|e| Error::format(e, path, doing))
}

impl Reader {
    /// Opens a file for positioned reads, without mapping it.
    ///
    /// # Errors
    /// - `Io` if the file cannot be opened or read.
    /// - `Format` if the head is malformed (see `docs/FORMAT.md`).
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        Reader::open_with(path, ReadOptions::default())
    }

    /// [`Reader::open`] with options.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<Reader> {
        // SAFETY: not mappable: nothing is mapped.
        unsafe { Reader::open_inner(path.as_ref(), options, false) }
    }

    /// Opens `path`; with `mappable`, the reader may map the file.
    ///
    /// # Safety
    /// With `mappable`, as [`Reader::open_mmap`]; without, none.
    unsafe fn open_inner(path: &Path, options: ReadOptions, mappable: bool) -> Result<Reader> {
        let file = File::open(path).map_err(|e| Error::io(e, path, "cannot open"))?;
        let file_len = file.metadata().map_err(|e| Error::io(e, path, "cannot open"))?.len();
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_from(Source::File(file), file_len, path, options, mappable) }
    }

    /// Opens a file whose bytes come from `source` (for example an object on
    /// a remote store, `deathtensors-remote`), `len` bytes long; `name` (its
    /// URL) stands for a path in errors. Everything [`Reader::open_with`]
    /// checks is checked, through positioned reads of `source`: the head is
    /// read with one read of [`PROBE_LEN`](deathtensors_format::PROBE_LEN)
    /// bytes at 0 and one of the whole head (the source may serve the second
    /// from the first). Nothing is ever mapped; every whole-tensor read
    /// ([`Reader::read`], [`Reader::read_data_into`]) checks the bytes
    /// against the tensor's digest when the header has one, and a mismatch
    /// is an error (the buffer is zeroed), never data.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub fn open_source(
        source: Box<dyn ReadAt>,
        len: u64,
        name: impl AsRef<Path>,
        options: ReadOptions,
    ) -> Result<Reader> {
        // SAFETY: not mappable: nothing is mapped.
        unsafe { Reader::open_from(Source::Other(source), len, name.as_ref(), options, false) }
    }

    /// Opens the file read through `file`.
    ///
    /// # Safety
    /// With `mappable`, as [`Reader::open_mmap`]; without, none.
    unsafe fn open_from(
        file: Source,
        file_len: u64,
        path: &Path,
        options: ReadOptions,
        mappable: bool,
    ) -> Result<Reader> {
        let mut probe = vec![0u8; (PROBE_LEN as u64).min(file_len) as usize];
        read_exact_at(&file, &mut probe, 0).map_err(|e| Error::io(e, path, "cannot open"))?;
        // A signed file is parsed as if its signature block were absent.
        let (body_len, signatures) = trust::split_signatures(&file, file_len, &probe, path)?;
        let map = OnceLock::new();
        let head = read_head_from(&file, file.file(), body_len, path, &options.limits, mappable.then_some(&map))?;
        if map.get().and_then(|m| m.as_ref().ok()).is_some_and(|m| m.bytes().len() as u64 != file_len) {
            return Err(Error::input("the file changed size while it was opened".to_string(), path, "cannot open"));
        }
        let (trust, unsealed) = trust::check(&file, path, &head, signatures, &options)?;
        let head = unsealed.unwrap_or(head);
        Ok(Reader {
            path: path.to_path_buf(),
            file,
            file_len,
            head,
            mappable,
            map,
            blob: OnceLock::new(),
            options,
            trust,
        })
    }

    /// Opens a file and maps it, for zero-copy access with [`Reader::bytes`].
    ///
    /// # Safety
    /// The file must not be modified or truncated while the `Reader` lives:
    /// a modification changes bytes already validated, and a truncation
    /// makes access to the lost pages kill the process with SIGBUS. Owned
    /// reads ([`Reader::read`]) never touch the mapping and stay safe.
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub unsafe fn open_mmap(path: impl AsRef<Path>) -> Result<Reader> {
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_mmap_with(path, ReadOptions::default()) }
    }

    /// [`Reader::open_mmap`] with options.
    ///
    /// # Safety
    /// As [`Reader::open_mmap`].
    ///
    /// # Errors
    /// As [`Reader::open`].
    pub unsafe fn open_mmap_with(path: impl AsRef<Path>, options: ReadOptions) -> Result<Reader> {
        // The mapping is made on first zero-copy access (opening stays as
        // cheap as `open` for callers that never borrow), or at once when
        // the head is parsed from it.
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { Reader::open_inner(path.as_ref(), options, true) }
    }

    /// The mapping, made on first use (only for `open_mmap` readers).
    fn map(&self) -> Result<&Mmap> {
        let map = self.map.get_or_init(|| {
            // SAFETY: `mappable` is set only by `open_mmap`, whose caller
            // took on the contract of `Mmap::map`.
            let file = self.file.file().ok_or("a remote file cannot be mapped")?;
            let map = unsafe { Mmap::map(file) }.map_err(|e| e.to_string())?;
            // The file may have changed since its head was read.
            if map.bytes().len() as u64 != self.file_len {
                return Err("the file changed size since it was opened".to_string());
            }
            Ok(map)
        });
        map.as_ref().map_err(|m| Error::input(m.clone(), &self.path, "cannot map"))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The validated head: header, flags, and where the blob and footer are.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.head.header
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        self.head.header.format()
    }

    /// The length of the file in bytes when it was opened.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Whether the file has a SHA-256 footer.
    pub fn has_footer(&self) -> bool {
        self.head.footer().is_some()
    }

    /// Whether the file is compressed: its data blob is one zstd frame
    /// (deathtensors 0.2/0.3, flag bit 0), or its tensors are compressed one
    /// by one in chunks (flag bit 5).
    pub fn is_compressed(&self) -> bool {
        self.head.is_compressed() || self.head.is_chunk_compressed()
    }

    /// Whether tensor `name` is stored compressed in chunks (flag bit 5:
    /// tensors that did not shrink, and tiny ones, are stored raw).
    pub fn is_tensor_compressed(&self, name: &str) -> bool {
        self.head.header.position(name).is_some_and(|i| self.head.header.chunk_table(i).is_some())
    }

    /// The tensor `name` if it is stored compressed in chunks.
    fn packed(&self, name: &str) -> Option<crate::compress::Packed<'_>> {
        let header = &self.head.header;
        let i = header.position(name)?;
        let table = header.chunk_table(i)?;
        let t = &header.tensors()[i];
        Some(crate::compress::Packed {
            file: &self.file,
            path: &self.path,
            name: &t.name,
            dtype: t.dtype,
            table,
            file_offset: self.head.data_start + t.data_offsets.0,
        })
    }

    /// Refuses to decompress `len` bytes of compressed tensors into memory
    /// this crate (or a binding) allocates, past `max_decompressed_len`: a
    /// small hostile file may declare huge tensors.
    fn check_unpacked(&self, what: &str, len: u64) -> Result<()> {
        let max = self.options.max_decompressed_len;
        if len > max {
            return Err(Error::new(
                ErrorKind::Decompress(format!(
                    "{what} declares {len} bytes of compressed data, over the limit of {max} \
                     (ReadOptions::max_decompressed_len)"
                )),
                Some(&self.path),
                "cannot read",
            ));
        }
        Ok(())
    }

    /// The raw length of tensor `name`, for a caller about to allocate a
    /// buffer for it.
    ///
    /// # Errors
    /// `TensorNotFound`; `Decompress` if the tensor is stored compressed and
    /// declares more than `ReadOptions::max_decompressed_len` bytes.
    pub fn unpacked_tensor_len(&self, name: &str) -> Result<u64> {
        let len = self.tensor(name)?.info.byte_len();
        if self.packed(name).is_some() {
            self.check_unpacked(&format!("tensor {name:?}"), len)?;
        }
        Ok(len)
    }

    /// The length of the buffer [`Reader::read_data_into`] needs
    /// ([`Reader::data_layout`]), for a caller about to allocate it.
    ///
    /// # Errors
    /// `Decompress` if the compressed tensors (or a 0.3.0 blob) would
    /// decompress to more than `ReadOptions::max_decompressed_len`.
    pub fn unpacked_len(&self) -> Result<u64> {
        let header = &self.head.header;
        if self.head.is_compressed() {
            self.check_unpacked("the zstd blob", header.data_len())?;
        }
        if self.head.is_chunk_compressed() {
            let packed = (0..header.len())
                .filter(|&i| header.chunk_table(i).is_some())
                .fold(0u64, |acc, i| acc.saturating_add(header.tensors()[i].byte_len()));
            self.check_unpacked("the file", packed)?;
        }
        Ok(self.data_layout().1)
    }

    /// Where [`Reader::read_data_into`] puts each tensor (header order) and
    /// how long its buffer is: the blob's own layout (`data_offsets`,
    /// [`Header::data_len`]), except for a file of compressed tensors, whose
    /// raw tensors are laid out as an uncompressed file would be (same order
    /// and alignment).
    pub fn data_layout(&self) -> (Vec<(u64, u64)>, u64) {
        let header = &self.head.header;
        if !self.head.is_chunk_compressed() {
            return (header.tensors().iter().map(|t| t.data_offsets).collect(), header.data_len());
        }
        let mut order: Vec<usize> = (0..header.len()).collect();
        order.sort_by_key(|&i| header.tensors()[i].data_offsets);
        let mut out = vec![(0, 0); header.len()];
        let mut at = 0u64;
        let align = header.alignment().max(1);
        for i in order {
            // Raw lengths of a valid header sum to at most its stored
            // blob's worth of chunks, far below u64::MAX.
            let start = at.div_ceil(align).saturating_mul(align);
            let end = start.saturating_add(header.tensors()[i].byte_len());
            out[i] = (start, end);
            at = end;
        }
        (out, at)
    }

    /// The global metadata, without the crypto fields of a cryptotensors
    /// file: they describe its encryption, not the model, and a copy that
    /// decrypts or re-encrypts it must not carry them over.
    pub fn model_metadata(&self) -> Option<deathtensors_format::Metadata> {
        let mut m = self.head.header.metadata().cloned();
        if let (Some(m), true) = (&mut m, self.is_cryptotensors()) {
            for k in deathtensors_format::CT_RESERVED {
                m.remove(*k);
            }
        }
        m
    }

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
    fn plaintext_only(&self, doing: &'static str) -> Result<()> {
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

    /// Whether the bytes come from a source other than a local file (a
    /// remote object): then every whole tensor read is checked against its
    /// digest, when it has one, before it is returned.
    pub fn is_remote(&self) -> bool {
        matches!(self.file, Source::Other(_))
    }

    /// Fetches the stored bytes of the named tensors ahead, for sources
    /// that read ranges remotely ([`Reader::open_source`]), which coalesce
    /// neighbours into one request; a local file ignores it. Names not in
    /// the file are skipped (reading them reports it), and so is a file
    /// whose blob is one zstd frame (read whole anyway).
    ///
    /// # Errors
    /// `Io` if the source fails.
    pub fn prefetch(&self, names: &[&str]) -> Result<()> {
        if !self.is_remote() || self.head.is_compressed() {
            return Ok(());
        }
        let mut ranges: Vec<(u64, u64)> = names
            .iter()
            .filter_map(|n| self.head.header.get(n))
            .map(|t| (self.head.data_start + t.data_offsets.0, t.data_offsets.1 - t.data_offsets.0))
            .collect();
        self.file.prefetch(&mut ranges).map_err(|e| Error::io(e, &self.path, "cannot read"))
    }

    /// Whether whole reads check each tensor that has a digest against it:
    /// under checked reads (where a tensor without one is an error), and for
    /// remote sources (where one without is returned unchecked).
    fn digest_reads(&self) -> bool {
        self.trust.checked_reads || (self.is_remote() && self.head.header.has_tensor_digests())
    }

    /// With checked reads, or from a remote source, checks the bytes of a
    /// plaintext tensor about to be returned against its digest.
    fn check_read(&self, name: &str, bytes: &[u8]) -> Result<()> {
        if self.is_encrypted() {
            return Ok(());
        }
        if self.trust.checked_reads
            || self.head.header.get(name).is_some_and(|t| t.sha256.is_some()) && self.is_remote()
        {
            return self.check_bytes(name, bytes);
        }
        Ok(())
    }

    /// Refuses mappings under checked reads: a mapping's pages come from the
    /// file after any check, so nothing could be checked for the caller.
    fn unchecked_only(&self, doing: &'static str) -> Result<()> {
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

    /// `NoKey` for a sealed file opened without its key: its header hides
    /// every tensor, and whatever lists, compares or checks them all must
    /// not take it for a file without any.
    ///
    /// # Errors
    /// `NoKey`, naming the file's recipients.
    pub fn check_not_hidden(&self) -> Result<()> {
        if self.is_sealed() && self.trust.cipher.is_none() {
            let recipients = trust::recipients(&self.head);
            return Err(Error::new(ErrorKind::NoKey { recipients }, Some(&self.path), "cannot read"));
        }
        Ok(())
    }

    /// The tensor of this name, in O(1).
    ///
    /// # Errors
    /// `TensorNotFound` if there is none.
    pub fn tensor(&self, name: &str) -> Result<TensorRef<'_>> {
        self.check_not_hidden()?;
        let info =
            self.head.header.get(name).ok_or_else(|| {
                Error::new(ErrorKind::TensorNotFound(name.to_string()), Some(&self.path), "cannot read")
            })?;
        Ok(TensorRef { info, file_offset: self.head.data_start + info.data_offsets.0 })
    }

    /// The decompressed blob of a zstd file, decompressed once, bounded by
    /// the size the header declares.
    fn blob(&self) -> Result<&[u8]> {
        let blob = self.blob.get_or_init(|| self.decompress());
        blob.as_deref().map_err(|m| Error::new(ErrorKind::Decompress(m.clone()), Some(&self.path), "cannot read"))
    }

    fn decompress(&self) -> std::result::Result<Vec<u8>, String> {
        let want = self.head.header.data_len();
        if want > self.options.max_decompressed_len {
            return Err(format!(
                "the header declares {want} bytes of data, over the limit of {}",
                self.options.max_decompressed_len
            ));
        }
        let mut compressed = vec![0u8; (self.head.data_end - self.head.data_start) as usize];
        read_exact_at(&self.file, &mut compressed, self.head.data_start).map_err(|e| e.to_string())?;
        if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(&compressed) {
            if size != want {
                return Err(format!("the zstd frame holds {size} bytes, the header declares {want}"));
            }
        }
        let mut decoder =
            zstd::stream::read::Decoder::with_buffer(&compressed[..]).map_err(|e| e.to_string())?.single_frame();
        // Grow with the output, never past one byte more than declared: a
        // bomb stops at the declared size, however large its expansion.
        let mut out = Vec::with_capacity(want.min(compressed.len() as u64 * 8) as usize);
        (&mut decoder).take(want + 1).read_to_end(&mut out).map_err(|e| e.to_string())?;
        if out.len() as u64 != want {
            return Err(format!("the zstd frame holds {}+ bytes, the header declares {want}", out.len()));
        }
        let rest = decoder.finish();
        if !rest.is_empty() {
            return Err(format!("{} bytes follow the zstd frame", rest.len()));
        }
        Ok(out)
    }

    /// The tensor's bytes without copying: borrowed from the mapping, or from
    /// the decompressed blob of a compressed file.
    ///
    /// # Errors
    /// - `TensorNotFound` if there is no such tensor.
    /// - `InvalidInput` if the file is neither mapped ([`Reader::open_mmap`])
    ///   nor compressed: use [`Reader::read`].
    /// - `Decompress` if a compressed blob is corrupt.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        self.plaintext_only("cannot borrow")?;
        self.unchecked_only("cannot borrow")?;
        let bytes = self.bytes_unchecked(name)?;
        Ok(bytes)
    }

    fn bytes_unchecked(&self, name: &str) -> Result<&[u8]> {
        let t = self.tensor(name)?;
        if self.packed(name).is_some() {
            return Err(Error::input(
                format!("tensor {name:?} is stored compressed: read it with read() or read_into()"),
                &self.path,
                "cannot borrow",
            ));
        }
        let (start, end) = t.info.data_offsets;
        if self.head.is_compressed() {
            return Ok(&self.blob()?[start as usize..end as usize]);
        }
        if !self.mappable {
            return Err(Error::input(
                "the file is not mapped: open it with open_mmap for zero-copy access, or use read()",
                &self.path,
                "cannot borrow",
            ));
        }
        let map = self.map()?;
        Ok(&map.bytes()[t.file_offset as usize..(t.file_offset + (end - start)) as usize])
    }

    /// Maps the data blob copy-on-write: the fastest way to load a whole
    /// warm file into memory the caller may write to, since the pages stay
    /// the page cache's until written, with no copy and no fresh memory.
    /// Tensor `t`'s bytes are at `t.info.data_offsets` in the result, at an
    /// address aligned as [`TensorRef::is_aligned`] says.
    ///
    /// # Safety
    /// The file must not be truncated or modified in place while the
    /// mapping lives: pages not yet written see the change, and a truncation
    /// makes access to them kill the process with SIGBUS. A file replaced by
    /// a rename (as our writers do) is safe. Owned reads ([`Reader::read`])
    /// have no such condition.
    ///
    /// # Errors
    /// - `InvalidInput` for a compressed file (its blob must be decompressed:
    ///   use [`Reader::read`] or [`Reader::bytes`]).
    /// - `Io` if the file cannot be mapped or changed size since it was opened.
    pub unsafe fn map_private(&self) -> Result<crate::PrivateMap> {
        self.plaintext_only("cannot map")?;
        self.unchecked_only("cannot map")?;
        if self.head.is_chunk_compressed() {
            return Err(Error::input(
                "the tensors are stored compressed: read them with read_data_into() or read()",
                &self.path,
                "cannot map",
            ));
        }
        let (start, end) = (self.head.data_start, self.head.data_end);
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { self.map_range(start, end - start) }
    }

    /// Maps one tensor's bytes copy-on-write, as [`Reader::map_private`]
    /// does the whole blob.
    ///
    /// # Safety
    /// As [`Reader::map_private`].
    ///
    /// # Errors
    /// As [`Reader::map_private`], and `TensorNotFound`.
    pub unsafe fn map_tensor_private(&self, name: &str) -> Result<crate::PrivateMap> {
        self.plaintext_only("cannot map")?;
        self.unchecked_only("cannot map")?;
        let t = self.tensor(name)?;
        if self.packed(name).is_some() {
            return Err(Error::input(
                format!("tensor {name:?} is stored compressed: read it with read() or read_into()"),
                &self.path,
                "cannot map",
            ));
        }
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { self.map_range(t.file_offset, t.info.byte_len()) }
    }

    /// # Safety
    /// As [`Reader::map_private`].
    unsafe fn map_range(&self, start: u64, len: u64) -> Result<crate::PrivateMap> {
        let doing = "cannot map";
        if self.head.is_compressed() {
            return Err(Error::input("the data blob is compressed: it cannot be mapped", &self.path, doing));
        }
        let Some(file) = self.file.file() else {
            return Err(Error::input("a remote file cannot be mapped: read it", &self.path, doing));
        };
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { crate::PrivateMap::map(file, self.file_len, start, len) }.map_err(|e| Error::io(e, &self.path, doing))
    }

    /// Reads the tensor's bytes into `buf`, which must be exactly as long as
    /// the tensor. Uses positioned reads, never the mapping.
    ///
    /// # Errors
    /// - `TensorNotFound`, `InvalidInput` for a wrong buffer length.
    /// - `Io` if the file cannot be read (for example, it was truncated).
    /// - `Decompress` for a corrupt compressed blob.
    pub fn read_into(&self, name: &str, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        let len = t.info.byte_len();
        if buf.len() as u64 != len {
            return Err(Error::input(
                format!("buffer is {} bytes, tensor {name:?} is {len}", buf.len()),
                &self.path,
                "cannot read",
            ));
        }
        if self.is_encrypted() {
            return self.decrypt_into(name, 0, buf);
        }
        if let Some(packed) = self.packed(name) {
            packed.read_range(0, buf)?;
        } else if self.head.is_compressed() {
            let (start, end) = t.info.data_offsets;
            buf.copy_from_slice(&self.blob()?[start as usize..end as usize]);
        } else {
            // One thread: into a fresh buffer of small pages, parallel
            // readers contend on its page faults and are slower (measured).
            read_exact_at(&self.file, buf, t.file_offset).map_err(|e| Error::io(e, &self.path, "cannot read"))?;
        }
        if let Err(e) = self.check_read(name, buf) {
            buf.fill(0);
            return Err(e);
        }
        Ok(())
    }

    /// Decrypts every tensor into its place in `buf` (the blob), tensors
    /// shared out to all cores as each finishes one; gaps are zeroed. On an
    /// error, `buf` is zeroed.
    fn decrypt_tensors(&self, buf: &mut [u8]) -> Result<()> {
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
    fn decrypt_into(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
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
        trust::decrypt_range(&self.file, &self.path, &self.head, &self.trust, index, t.info, t.file_offset, offset, buf)
    }

    /// Reads `buf.len()` bytes of the tensor starting `offset` bytes into it,
    /// for streaming through a tensor in chunks (positioned reads).
    ///
    /// # Errors
    /// As [`Reader::read_into`]; `InvalidInput` if the range is past the tensor.
    pub fn read_range_into(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        let len = t.info.byte_len();
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(Error::input(
                format!("range {offset}+{} is past the end of tensor {name:?} ({len} bytes)", buf.len()),
                &self.path,
                "cannot read",
            ));
        };
        if self.is_encrypted() {
            return self.decrypt_into(name, offset, buf);
        }
        if self.trust.checked_reads {
            // A slice comes from the whole tensor, read once and checked.
            let whole = self.read(name)?;
            buf.copy_from_slice(&whole[offset as usize..end as usize]);
            return Ok(());
        }
        if let Some(packed) = self.packed(name) {
            return packed.read_range(offset, buf);
        }
        if self.head.is_compressed() {
            let start = t.info.data_offsets.0 + offset;
            buf.copy_from_slice(&self.blob()?[start as usize..(start + (end - offset)) as usize]);
            return Ok(());
        }
        read_exact_at(&self.file, buf, t.file_offset + offset).map_err(|e| Error::io(e, &self.path, "cannot read"))
    }

    /// Reads the whole (decompressed) data blob into `buf`, which must be
    /// exactly [`Header::data_len`] bytes: every tensor at its offset, gaps
    /// zero. Large reads are split over all cores, so page faults of a fresh
    /// buffer are taken in parallel. Positioned reads, never the mapping.
    ///
    /// # Errors
    /// `InvalidInput` for a wrong length; `Io`; `Decompress`.
    pub fn read_data_into(&self, buf: &mut [u8]) -> Result<()> {
        if self.head.is_chunk_compressed() {
            return self.read_unpacked_into(buf);
        }
        let len = self.head.header.data_len();
        if buf.len() as u64 != len {
            return Err(Error::input(
                format!("buffer is {} bytes, the data blob is {len}", buf.len()),
                &self.path,
                "cannot read",
            ));
        }
        if self.is_encrypted() {
            if self.head.header.encryption().is_some() {
                if let Some(done) = trust::decrypt_all(&self.file, &self.path, &self.head, &self.trust, buf) {
                    return done;
                }
            }
            // Tensor by tensor (cryptotensors files, other writers' orders),
            // tensors spread over all cores.
            return self.decrypt_tensors(buf);
        }
        if self.head.is_compressed() {
            buf.copy_from_slice(self.blob()?);
        } else {
            match &self.file {
                Source::File(file) => read_parallel(file, buf, self.head.data_start),
                Source::Other(source) if self.digest_reads() => return self.read_checked_windows(&**source, buf),
                // A remote source splits and parallelises one read itself.
                Source::Other(source) => source.read_exact_at(buf, self.head.data_start),
            }
            .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
        }
        if self.digest_reads() {
            let layout: Vec<(u64, u64)> = self.head.header.tensors().iter().map(|t| t.data_offsets).collect();
            return self.check_laid_out(buf, &layout);
        }
        Ok(())
    }

    /// [`Reader::read_data_into`] from a remote source with digests to check:
    /// the blob is read in windows of whole tensors (about 64 MiB), each
    /// window's tensors hashed on another thread while the next window is
    /// fetched, so that checking keeps pace with the transfer instead of
    /// following it. A failed digest zeroes `buf`.
    fn read_checked_windows(&self, source: &dyn ReadAt, buf: &mut [u8]) -> Result<()> {
        let tensors = self.head.header.tensors();
        let windows = self.windows(buf.len() as u64);
        let (sender, receiver) = std::sync::mpsc::channel::<(u64, &[u8], Vec<usize>)>();
        let result = std::thread::scope(|s| {
            let checker = s.spawn(move || -> Result<()> {
                for (at, bytes, group) in receiver {
                    let inputs: Vec<Input<'_>> = group
                        .iter()
                        .map(|&i| {
                            let (a, b) = tensors[i].data_offsets;
                            Input::Bytes(&bytes[(a - at) as usize..(b - at) as usize])
                        })
                        .collect();
                    let digests =
                        crate::sha_lanes::digests(&inputs).map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
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
    fn windows(&self, len: u64) -> Vec<(u64, u64, Vec<usize>)> {
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
    fn verify_one_pass(&self) -> Option<Result<()>> {
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
                let inputs: Vec<Input<'_>> = group
                    .iter()
                    .map(|&i| {
                        let (a, b) = tensors[i].data_offsets;
                        Input::Bytes(&buf[(a - start) as usize..(b - start) as usize])
                    })
                    .collect();
                let digests = crate::sha_lanes::digests(&inputs).map_err(io)?;
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
    fn check_laid_out(&self, buf: &mut [u8], layout: &[(u64, u64)]) -> Result<()> {
        let tensors = self.head.header.tensors();
        let inputs: Vec<Input<'_>> =
            layout.iter().map(|&(start, end)| Input::Bytes(&buf[start as usize..end as usize])).collect();
        let digests = crate::sha_lanes::digests(&inputs).map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
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

    /// [`Reader::read_data_into`] for a file of compressed tensors: every
    /// tensor at its place in [`Reader::data_layout`], the chunks of all
    /// tensors (and the raw tensors) shared out to all cores.
    fn read_unpacked_into(&self, buf: &mut [u8]) -> Result<()> {
        let (layout, len) = self.data_layout();
        if buf.len() as u64 != len {
            return Err(Error::input(
                format!("buffer is {} bytes, the tensors take {len}", buf.len()),
                &self.path,
                "cannot read",
            ));
        }
        let tensors = self.head.header.tensors();
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| layout[i]);
        enum Job<'a, 'b> {
            Raw(u64, &'b mut [u8]),
            Chunk(crate::compress::Packed<'a>, deathtensors_format::Chunk, &'b mut [u8]),
        }
        let mut jobs: Vec<Job<'_, '_>> = Vec::new();
        let mut rest: &mut [u8] = &mut *buf;
        let mut at = 0u64;
        for i in order {
            let (start, end) = layout[i];
            let (gap, tail) = std::mem::take(&mut rest).split_at_mut((start - at) as usize);
            gap.fill(0);
            let (mine, tail) = tail.split_at_mut((end - start) as usize);
            rest = tail;
            at = end;
            match self.packed(&tensors[i].name) {
                Some(p) => jobs.extend(p.jobs(0, mine).into_iter().map(|(c, _, out)| Job::Chunk(p, c, out))),
                None => jobs.push(Job::Raw(self.head.data_start + tensors[i].data_offsets.0, mine)),
            }
        }
        rest.fill(0);
        let result = crate::compress::parallel(jobs, hash::threads(), |codec, job| match job {
            Job::Raw(offset, out) => {
                read_exact_at(&self.file, out, offset).map_err(|e| Error::io(e, &self.path, "cannot read"))
            }
            Job::Chunk(p, c, out) => p.read_chunk(codec, c, 0, out),
        });
        if let Err(e) = result {
            buf.fill(0);
            return Err(e);
        }
        if self.digest_reads() {
            return self.check_laid_out(buf, &layout);
        }
        Ok(())
    }

    /// Reads the tensor's bytes into a fresh buffer the caller owns.
    ///
    /// # Errors
    /// As [`Reader::read_into`].
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let len = self.unpacked_tensor_len(name)?;
        let mut buf = vec![0u8; len as usize];
        self.read_into(name, &mut buf)?;
        Ok(buf)
    }

    /// Reads the tensor and checks its bytes against its `sha256` digest.
    ///
    /// # Errors
    /// As [`Reader::read`], plus `NoChecksum` if the tensor has no digest and
    /// `TensorDigestMismatch` if the bytes do not match it.
    pub fn read_verified(&self, name: &str) -> Result<Vec<u8>> {
        let bytes = self.read(name)?;
        self.check_bytes(name, &bytes)?;
        Ok(bytes)
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
    fn check_digest(&self, name: &str, hash: impl FnOnce(TensorRef<'_>) -> Result<[u8; 32]>) -> Result<()> {
        let t = self.tensor(name)?;
        let Some(expected) = t.info.sha256.as_deref().copied() else {
            return Err(Error::new(
                ErrorKind::NoChecksum { what: "sha256 digest for this tensor" },
                Some(&self.path),
                "cannot verify",
            ));
        };
        let actual = hash(t)?;
        if actual != expected {
            return Err(Error::new(
                ErrorKind::TensorDigestMismatch { tensor: name.to_string(), expected, actual },
                Some(&self.path),
                "verification failed for",
            ));
        }
        Ok(())
    }

    /// Checks one tensor against its `sha256` digest, without keeping its bytes.
    ///
    /// # Errors
    /// As [`Reader::read_verified`].
    pub fn verify_tensor(&self, name: &str) -> Result<()> {
        self.check_digest(name, |t| {
            if let Some(packed) = self.packed(name) {
                return packed.digest(&mut crate::compress::ChunkCodec::new());
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
    fn check_footer(&self, expected: [u8; 32], actual: [u8; 32]) -> Result<()> {
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
    /// records digests: compare them with [`TensorInfo::sha256`].
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
        crate::sha_lanes::digests_with(&inputs, &progress).map_err(|e| Error::io(e, &self.path, "cannot hash"))
    }

    /// [`Reader::compute_digests`] for a file of compressed tensors: raw
    /// tensors as usual, compressed ones decompressed chunk by chunk, one
    /// tensor per core at a time.
    fn compute_packed_digests(&self, names: &[&str], progress: impl Fn(u64) + Sync) -> Result<Vec<[u8; 32]>> {
        let (packed, raw): (Vec<usize>, Vec<usize>) = (0..names.len()).partition(|&k| self.packed(names[k]).is_some());
        let raw_names: Vec<&str> = raw.iter().map(|&k| names[k]).collect();
        let mut out = vec![[0u8; 32]; names.len()];
        let tensors = raw_names.iter().map(|n| self.tensor(n)).collect::<Result<Vec<_>>>()?;
        let inputs: Vec<Input<'_>> = tensors
            .iter()
            .map(|t| Input::File { file: &self.file, offset: t.file_offset, len: t.info.byte_len() })
            .collect();
        let digests =
            crate::sha_lanes::digests_with(&inputs, &progress).map_err(|e| Error::io(e, &self.path, "cannot hash"))?;
        for (&k, d) in raw.iter().zip(digests) {
            out[k] = d;
        }
        let slots: Vec<(usize, &mut [u8; 32])> =
            out.iter_mut().enumerate().filter(|(k, _)| packed.contains(k)).collect();
        crate::compress::parallel(slots, hash::threads(), |codec, (k, slot)| {
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
    pub fn verify(&self) -> Result<()> {
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
            (true, false) => self.verify_footer()?,
            (false, true) => self.verify_tensors()?,
            (true, true) => {
                // A remote object: transferred once for both checks.
                if let Some(done) = self.verify_one_pass() {
                    done?;
                } else {
                    let (footer, tensors) = std::thread::scope(|s| {
                        let footer = s.spawn(|| self.verify_footer());
                        let tensors = self.verify_tensors();
                        (footer.join().unwrap_or_else(|p| std::panic::resume_unwind(p)), tensors)
                    });
                    // A corrupt tensor is the more precise report.
                    tensors?;
                    footer?;
                }
            }
        }
        if tags {
            self.verify_tags(|_| {})?;
        }
        Ok(())
    }
}
