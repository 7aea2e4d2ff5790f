//! Compressed files: the decompressed blob of a zstd file, and tensors
//! compressed one by one in chunks.

use std::io::Read;

use super::Reader;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::hash;
use crate::fs::pread::read_exact_at;

impl Reader {
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
    pub(super) fn packed(&self, name: &str) -> Option<crate::file::compress::Packed<'_>> {
        let header = &self.head.header;
        let i = header.position(name)?;
        let table = header.chunk_table(i)?;
        let t = &header.tensors()[i];
        Some(crate::file::compress::Packed {
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
    pub(super) fn check_unpacked(&self, what: &str, len: u64) -> Result<()> {
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

    /// The decompressed blob of a zstd file, decompressed once, bounded by
    /// the size the header declares.
    pub(super) fn blob(&self) -> Result<&[u8]> {
        let blob = self.blob.get_or_init(|| self.decompress());
        blob.as_deref().map_err(|m| Error::new(ErrorKind::Decompress(m.clone()), Some(&self.path), "cannot read"))
    }

    pub(super) fn decompress(&self) -> std::result::Result<Vec<u8>, String> {
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

    /// [`Reader::read_data_into`] for a file of compressed tensors: every
    /// tensor at its place in [`Reader::data_layout`], the chunks of all
    /// tensors (and the raw tensors) shared out to all cores.
    pub(super) fn read_unpacked_into(&self, buf: &mut [u8]) -> Result<()> {
        let (layout, len) = self.data_layout();
        self.check_buffer(buf, len, "the tensors take")?;
        let tensors = self.head.header.tensors();
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| layout[i]);
        enum Job<'a, 'b> {
            Raw(u64, &'b mut [u8]),
            Chunk(crate::file::compress::Packed<'a>, deathtensors_format::Chunk, &'b mut [u8]),
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
        let result = crate::file::compress::parallel(jobs, hash::threads(), |codec, job| match job {
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
}
