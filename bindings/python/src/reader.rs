//! `deathtensors._native.Reader`: an open file.

use std::os::raw::c_int;
use std::sync::{Arc, RwLock};

use deathtensors_io::format::{hex_digest, parse_hex_digest, Dtype, Format, Metadata, TensorInfo};
use deathtensors_io::{PlacedRead, Placement, Reader, RegionCheck, RegionRead, TensorRef};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::arena::PyArena;
use crate::errors::IntoPy;
use crate::info::{PyCompression, PyEncryption, PyTensorCompression, PyTensorInfo};
use crate::names::{PyTensorNames, LAZY_NAMES_MIN};
use crate::options::PyReadOptions;

/// One read of `Reader.read_regions_into`: name, `(start, length)` in each
/// dimension (`None`: the whole tensor), the buffer, whether to verify, and
/// a digest (hex) to verify against instead of the stored one.
type RegionArg<'py> = (String, Option<Vec<(u64, u64)>>, Bound<'py, PyAny>, bool, Option<String>);

/// One read of `Reader.read_regions_placed`: name, region (`None`: the
/// whole tensor), the index of its buffer, its placement `(offset, run,
/// stride)`, whether to verify, and a digest (hex) to verify against.
type PlacedArg = (String, Option<Vec<(u64, u64)>>, usize, (usize, usize, usize), bool, Option<String>);

/// What a region read checks: nothing, the stored digest, or `sha256` (hex).
fn region_check(verify: bool, sha256: Option<String>) -> PyResult<RegionCheck> {
    Ok(match (verify, sha256) {
        (false, _) => RegionCheck::Unchecked,
        (true, None) => RegionCheck::Stored,
        (true, Some(hex)) => RegionCheck::Digest(
            parse_hex_digest(&hex)
                .ok_or_else(|| PyValueError::new_err(format!("sha256 {hex:?} is not 64 hex digits")))?,
        ),
    })
}

/// `out` as a writable C-contiguous byte buffer, or an error naming `what`.
fn writable(out: &Bound<'_, PyAny>, what: &str) -> PyResult<PyBuffer<u8>> {
    let buf = PyBuffer::<u8>::get(out)?;
    if buf.readonly() || !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err(format!(
            "reading a region into {what:?} needs a writable C-contiguous buffer"
        )));
    }
    Ok(buf)
}

/// The starts and lengths of a region (`None`: the whole tensor).
fn region_bounds(
    r: &Reader,
    py: Python<'_>,
    name: &str,
    region: Option<Vec<(u64, u64)>>,
) -> PyResult<(Vec<u64>, Vec<u64>)> {
    Ok(match region {
        Some(region) => region.into_iter().unzip(),
        None => r.tensor(name).py(py)?.info.shape.iter().map(|&n| (0, n)).unzip(),
    })
}

/// Refuses buffers (`(address, length)`, named) that share memory: two
/// writers of the same bytes.
fn refuse_overlaps<'a>(spans: impl Iterator<Item = ((usize, usize), &'a str)>, why: &str) -> PyResult<()> {
    let mut spans: Vec<(usize, usize, &str)> =
        spans.filter(|((_, n), _)| *n > 0).map(|((at, n), name)| (at, at + n, name)).collect();
    spans.sort_unstable();
    match spans.windows(2).find(|w| w[1].0 < w[0].1) {
        Some(w) => {
            Err(PyValueError::new_err(format!("the buffers given for {:?} and {:?} overlap: {why}", w[0].2, w[1].2)))
        }
        None => Ok(()),
    }
}

/// An open deathtensors or safetensors file.
#[derive(Debug)]
#[pyclass(name = "Reader", module = "deathtensors._native", frozen)]
pub struct PyReader {
    inner: RwLock<Option<Arc<Reader>>>,
    /// The path opened: what an error after `close()` names.
    opened: std::path::PathBuf,
}

fn metadata_dict<'py>(py: Python<'py>, m: &Metadata) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// Readers of at least this many tensors are dropped on a thread of their
/// own: freeing a 20,000-tensor header (40,000 small allocations) takes
/// ~0.7 ms that `dt.open(path).keys()` would otherwise wait for.
const BACKGROUND_DROP_MIN: usize = 4096;

/// Drops `reader`, in the background when that is worth a thread.
fn release(reader: Option<Arc<Reader>>) {
    if let Some(reader) = reader.filter(|r| r.header().len() >= BACKGROUND_DROP_MIN) {
        // If the thread cannot start, the reader is dropped here instead.
        let _ = std::thread::Builder::new().name("deathtensors-free".into()).spawn(move || drop(reader));
    }
}

impl Drop for PyReader {
    fn drop(&mut self) {
        release(self.inner.get_mut().ok().and_then(Option::take));
    }
}

/// `(count, finite, zeros, nan, inf, min, max, mean, std)`.
type StatsTuple = (u64, u64, u64, u64, u64, Option<f64>, Option<f64>, Option<f64>, Option<f64>);

impl PyReader {
    pub(crate) fn get(&self) -> PyResult<Arc<Reader>> {
        let guard = self.inner.read().map_err(|_| PyValueError::new_err("reader lock poisoned"))?;
        guard
            .clone()
            .ok_or_else(|| PyValueError::new_err(format!("I/O operation on a closed file: {}", self.opened.display())))
    }

    fn tensor_info<'r>(reader: &'r Reader, py: Python<'_>, name: &str) -> PyResult<&'r TensorInfo> {
        Ok(reader.tensor(name).py(py)?.info)
    }
}

#[pymethods]
impl PyReader {
    /// Opens `path` (a local path or a URL) with `options` (keys, trust,
    /// limits, a store's options; None: the defaults). With `mmap`, a local
    /// file is also mapped for zero-copy views (`region`); it must then not
    /// be truncated while open.
    #[new]
    #[pyo3(signature = (path, options = None, mmap = true))]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        options: Option<Bound<'_, PyReadOptions>>,
        mmap: bool,
    ) -> PyResult<PyReader> {
        let (read, remote) = PyReadOptions::of(options);
        // A URL is never mapped: it is read with ranged requests.
        let mappable = mmap && deathtensors_remote::url_of(&path).is_none();
        let local = deathtensors_remote::url_of(&path).is_none();
        let reader = py
            .allow_threads(|| {
                let opened = if mappable {
                    // SAFETY: documented in Python: the file must not be
                    // modified or truncated while open; owned reads never
                    // touch the mapping.
                    unsafe { Reader::open_mmap_with(&path, read.clone()) }
                } else {
                    deathtensors_remote::open_any(&path, &remote, read.clone())
                };
                match opened {
                    // A numpy .npy/.npz: read as the safetensors file it
                    // converts to (torch checkpoints open as TorchFile).
                    Err(e)
                        if local
                            && !matches!(e.kind(), deathtensors_io::ErrorKind::Io(_))
                            && deathtensors_io::is_numpy_file(&path) =>
                    {
                        deathtensors_io::open_numpy_file(&path, read)
                    }
                    other => other,
                }
            })
            .py(py)?;
        Ok(PyReader { inner: RwLock::new(Some(Arc::new(reader))), opened: path })
    }

    /// Closes the file. Views made by `region` stay valid until dropped.
    fn close(&self) -> PyResult<()> {
        let mut guard = self.inner.write().map_err(|_| PyValueError::new_err("reader lock poisoned"))?;
        let reader = guard.take();
        drop(guard);
        release(reader);
        Ok(())
    }

    /// Whether the file is read from a URL (ranged requests; never mapped).
    fn is_remote(&self) -> PyResult<bool> {
        Ok(self.get()?.is_remote())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().map(|g| g.is_none()).unwrap_or(true)
    }

    #[getter]
    fn path(&self) -> PyResult<std::path::PathBuf> {
        Ok(self.get()?.path().to_path_buf())
    }

    /// "deathtensors", "safetensors" or "bintensors".
    #[getter]
    fn format(&self) -> PyResult<&'static str> {
        Ok(match self.get()?.format() {
            Format::Deathtensors => "deathtensors",
            Format::Safetensors => "safetensors",
            Format::Bintensors => "bintensors",
        })
    }

    /// Tensor names in header order: a list, or for a file of at least
    /// `LAZY_NAMES_MIN` tensors a lazy `TensorNames` sequence.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let r = self.get()?;
        if r.header().len() >= LAZY_NAMES_MIN {
            return Ok(Bound::new(py, PyTensorNames::new(r))?.into_any());
        }
        Ok(PyList::new(py, r.header().tensors().iter().map(|t| t.name.as_str()))?.into_any())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.get()?.header().len())
    }

    fn __contains__(&self, name: &str) -> PyResult<bool> {
        Ok(self.get()?.header().get(name).is_some())
    }

    /// Global metadata: a dict, or None for a safetensors file without one.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        // A cryptotensors file's crypto fields are not the model's metadata.
        let r = self.get()?;
        r.model_metadata().map(|m| metadata_dict(py, &m)).transpose()
    }

    /// The header's metadata as stored, a cryptotensors file's crypto
    /// fields included; None when it has none.
    fn raw_metadata<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let r = self.get()?;
        r.header().metadata().map(|m| metadata_dict(py, m)).transpose()
    }

    #[getter]
    fn created_by(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.header().created_by().map(str::to_string))
    }

    #[getter]
    fn alignment(&self) -> PyResult<u64> {
        Ok(self.get()?.header().alignment())
    }

    /// The tensor's header entry, fields named (`TensorInfo`).
    fn info(&self, py: Python<'_>, name: &str) -> PyResult<PyTensorInfo> {
        let r = self.get()?;
        let t = r.tensor(name).py(py)?;
        let info = t.info;
        Ok(PyTensorInfo {
            dtype: info.dtype.name(),
            shape: info.shape.to_vec(),
            data_offsets: info.data_offsets,
            metadata: metadata_dict(py, &info.metadata)?.unbind(),
            sha256: info.sha256.as_deref().map(hex_digest),
            file_offset: t.file_offset,
            aligned: t.is_aligned(),
        })
    }

    /// Every tensor in header order (or those at positions `[start,
    /// stop)`) as `(name, dtype, shape, start, end, aligned)`, offsets
    /// relative to the data blob: what loading them all needs, in one call
    /// (a block at a time for a large file). `aligned` is for a buffer holding the blob: a
    /// mapping of the file (`heap=False`: bytes sit as they do in the file),
    /// or `read_all`'s fresh memory (`heap=True`: the blob starts aligned).
    /// A file of compressed tensors is never mapped; `read_all` lays its
    /// tensors out raw (`Reader::data_layout`).
    #[pyo3(signature = (heap = false, start = 0, stop = None))]
    fn layout<'py>(
        &self,
        py: Python<'py>,
        heap: bool,
        start: usize,
        stop: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let r = self.get()?;
        let tensors = r.header().tensors();
        let n = tensors.len();
        let start = start.min(n);
        let range = start..stop.unwrap_or(n).clamp(start, n);
        let origin = if heap { 0 } else { r.head().data_start };
        let places = if heap && r.head().is_chunk_compressed() {
            r.data_layout().0.get(range.clone()).unwrap_or_default().to_vec()
        } else {
            tensors[range.clone()].iter().map(|t| t.data_offsets).collect()
        };
        // One str per dtype, shared by its rows (a million rows: 48 MB less).
        let mut dtypes: Vec<(Dtype, Bound<'py, PyString>)> = Vec::new();
        let mut rows = Vec::with_capacity(range.len());
        for (t, (start, end)) in tensors[range].iter().zip(places) {
            let aligned = TensorRef { info: t, file_offset: origin + start }.is_aligned();
            let dtype = match dtypes.iter().find(|(d, _)| *d == t.dtype) {
                Some((_, s)) => s.clone(),
                None => {
                    let s = PyString::new(py, t.dtype.name());
                    dtypes.push((t.dtype, s.clone()));
                    s
                }
            };
            rows.push((t.name.as_str(), dtype, &t.shape[..], start, end, aligned).into_pyobject(py)?);
        }
        PyList::new(py, rows)
    }

    /// How the file is compressed, or None: tensors one by one in chunks
    /// (flag bit 5), or deathtensors 0.3.0's whole-blob frame.
    fn compression(&self) -> PyResult<Option<PyCompression>> {
        let r = self.get()?;
        let h = r.header();
        if let Some(c) = h.compression() {
            let stored_bytes = h.tensors().iter().map(|t| t.stored_len()).sum();
            return Ok(Some(PyCompression {
                mode: "chunks",
                codec: c.codec.name(),
                level: Some(c.level),
                chunk_size: Some(c.chunk_size),
                raw_bytes: h.raw_len(),
                stored_bytes,
            }));
        }
        if r.head().is_compressed() {
            let stored_bytes = r.head().data_end - r.head().data_start;
            return Ok(Some(PyCompression {
                mode: "blob",
                codec: "zstd",
                level: None,
                chunk_size: None,
                raw_bytes: h.data_len(),
                stored_bytes,
            }));
        }
        Ok(None)
    }

    /// A tensor's compression, if it is stored compressed in chunks.
    fn tensor_compression(&self, py: Python<'_>, name: &str) -> PyResult<Option<PyTensorCompression>> {
        let r = self.get()?;
        let t = r.tensor(name).py(py)?;
        let pos = r.header().position(name).unwrap_or(0);
        Ok(r.header().chunk_table(pos).map(|c| PyTensorCompression {
            raw_bytes: t.info.byte_len(),
            stored_bytes: t.info.stored_len(),
            chunks: c.len(),
        }))
    }

    fn dtype(&self, py: Python<'_>, name: &str) -> PyResult<&'static str> {
        Ok(PyReader::tensor_info(&*self.get()?, py, name)?.dtype.name())
    }

    fn shape(&self, py: Python<'_>, name: &str) -> PyResult<Vec<u64>> {
        Ok(PyReader::tensor_info(&*self.get()?, py, name)?.shape.to_vec())
    }

    fn nbytes(&self, py: Python<'_>, name: &str) -> PyResult<u64> {
        Ok(PyReader::tensor_info(&*self.get()?, py, name)?.byte_len())
    }

    /// Names in data-offset order.
    fn offset_keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let r = self.get()?;
        let mut v: Vec<&TensorInfo> = r.header().tensors().iter().collect();
        v.sort_by_key(|t| t.data_offsets);
        PyList::new(py, v.into_iter().map(|t| t.name.as_str()))
    }

    fn has_footer(&self) -> PyResult<bool> {
        Ok(self.get()?.has_footer())
    }

    fn has_tensor_digests(&self) -> PyResult<bool> {
        let r = self.get()?;
        Ok(r.header().tensors().iter().any(|t| t.sha256.is_some()))
    }

    fn is_compressed(&self) -> PyResult<bool> {
        Ok(self.get()?.is_compressed())
    }

    fn is_encrypted(&self) -> PyResult<bool> {
        Ok(self.get()?.is_encrypted())
    }

    /// Whether every tensor returned is checked against its signed digest (a
    /// signed plaintext file, or a signature or encryption was required):
    /// such a reader reads, never maps.
    fn checked_reads(&self) -> PyResult<bool> {
        Ok(self.get()?.checked_reads())
    }

    /// Whether this file's tensors are mapped, viewed where they sit in
    /// the file (io's `Reader::maps_tensors`): a local file (not a URL)
    /// whose bytes are the tensors' own (neither compressed nor encrypted),
    /// read without per-read checks, on a local file system unless the
    /// options' `map_tensors` says otherwise. Whether a given tensor is then
    /// mapped depends on its alignment (`TensorInfo.aligned`) and the
    /// caller's size threshold.
    fn maps_tensors(&self) -> PyResult<bool> {
        let r = self.get()?;
        Ok(r.maps_tensors())
    }

    fn is_sealed(&self) -> PyResult<bool> {
        Ok(self.get()?.is_sealed())
    }

    /// Whether a key unwrapped the data key.
    fn can_decrypt(&self) -> PyResult<bool> {
        Ok(self.get()?.can_decrypt())
    }

    /// How the file is encrypted, or None.
    fn encryption(&self) -> PyResult<Option<PyEncryption>> {
        Ok(self.get()?.encryption_info().map(|e| PyEncryption {
            scheme: e.scheme,
            cipher: e.cipher,
            chunk_size: e.chunk_size,
            recipients: e.recipients,
            encrypted_tensors: e.encrypted_tensors,
            signer_kid: e.signer_kid,
        }))
    }

    /// The Rego policy a key holder's open evaluates, or None.
    fn policy(&self) -> PyResult<Option<String>> {
        Ok(self.get()?.policy())
    }

    /// What the file's signature covers: "header and data", "header", or
    /// None for an unsigned file.
    fn signature_covers(&self) -> PyResult<Option<&'static str>> {
        Ok(self.get()?.signature_covers().map(|c| c.as_str()))
    }

    /// The public keys (32 bytes each) of the signatures, all verified.
    fn signers<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyBytes>>> {
        Ok(self.get()?.signers().iter().map(|k| pyo3::types::PyBytes::new(py, &k.0)).collect())
    }

    /// The tensor's bytes as a new `bytes` object (a copy the caller owns).
    #[pyo3(signature = (name, verify = false))]
    fn read<'py>(&self, py: Python<'py>, name: &str, verify: bool) -> PyResult<Bound<'py, PyBytes>> {
        let r = self.get()?;
        let len = r.unpacked_tensor_len(name).py(py)? as usize;
        let mut failure = None;
        let bytes = PyBytes::new_with(py, len, |buf| {
            // The bytes object is not visible to other threads yet.
            let res = py.allow_threads(|| {
                r.read_into(name, buf).and_then(|()| if verify { r.verify_tensor(name) } else { Ok(()) })
            });
            if let Err(e) = res {
                failure = Some(e);
            }
            Ok(())
        })?;
        match failure {
            Some(e) => Err(crate::errors::to_py(py, e)),
            None => Ok(bytes),
        }
    }

    /// Reads the tensor's bytes into a writable, C-contiguous buffer of
    /// exactly its size (a numpy array, a torch tensor's numpy view, a
    /// bytearray), with the GIL released.
    #[pyo3(signature = (name, out, verify = false))]
    fn read_into(&self, py: Python<'_>, name: &str, out: &Bound<'_, PyAny>, verify: bool) -> PyResult<()> {
        let r = self.get()?;
        let buf = PyBuffer::<u8>::get(out)?;
        if buf.readonly() || !buf.is_c_contiguous() {
            return Err(PyBufferError::new_err("read_into needs a writable C-contiguous buffer"));
        }
        let ptr = buf.buf_ptr() as usize;
        let len = buf.len_bytes();
        py.allow_threads(|| {
            // SAFETY: `buf` keeps the exporter's memory alive and writable
            // for its lifetime, which covers this call; it is contiguous and
            // `len` bytes long.
            let slice = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
            if verify {
                // Hashes what is read as it is read, not the file again.
                r.read_verified_into(name, slice)
            } else {
                r.read_into(name, slice)
            }
        })
        .py(py)
    }

    /// Reads a region of the tensor, `(start, length)` in each dimension,
    /// into a writable, C-contiguous buffer of exactly the region's size, in
    /// row-major order, with the GIL released: a column band of a stored
    /// block, say, gathered as the tensor is read. With `verify`, every byte
    /// of the tensor is hashed as it is read and checked against `sha256`
    /// (hex) when given, else the stored digest.
    #[pyo3(signature = (name, region, out, verify = false, sha256 = None))]
    fn read_region_into(
        &self,
        py: Python<'_>,
        name: &str,
        region: Vec<(u64, u64)>,
        out: &Bound<'_, PyAny>,
        verify: bool,
        sha256: Option<&str>,
    ) -> PyResult<()> {
        self.read_regions_into(
            py,
            vec![(name.to_string(), Some(region), out.clone(), verify, sha256.map(str::to_string))],
        )
    }

    /// [`read_region_into`] for each `(name, region, out, verify, sha256)`
    /// of `reads` (a region of `None` is the whole tensor), in one call with
    /// the GIL released: every read is checked
    /// before any byte is read, and two tensors are hashed side by side (the
    /// SHA extensions' two lanes, faster than one read after the other).
    /// The buffers must not overlap. On an error every buffer is zeroed.
    fn read_regions_into(&self, py: Python<'_>, reads: Vec<RegionArg<'_>>) -> PyResult<()> {
        let r = self.get()?;
        let mut plans = Vec::with_capacity(reads.len());
        for (name, region, out, verify, sha256) in reads {
            let check = region_check(verify, sha256)?;
            let buf = writable(&out, &name)?;
            let (start, length) = region_bounds(&r, py, &name, region)?;
            let at = (buf.buf_ptr() as usize, buf.len_bytes());
            plans.push((name, start, length, check, at, buf));
        }
        // Two reads into the same memory would be two writers of it.
        refuse_overlaps(plans.iter().map(|p| (p.4, p.0.as_str())), "each read needs its own")?;
        py.allow_threads(|| {
            let mut batch: Vec<RegionRead<'_>> = plans
                .iter()
                .map(|(name, start, len, check, (ptr, n), _)| RegionRead {
                    name,
                    start,
                    len,
                    // SAFETY: each PyBuffer in `plans` keeps its exporter's
                    // memory alive and writable until `plans` is dropped,
                    // after this closure; it is contiguous, `n` bytes long,
                    // and no two of them overlap (checked above). A length
                    // of zero needs no valid address.
                    buf: if *n == 0 { &mut [] } else { unsafe { std::slice::from_raw_parts_mut(*ptr as *mut u8, *n) } },
                    check: *check,
                })
                .collect();
            r.read_regions_into(&mut batch)
        })
        .py(py)
    }

    /// Reads for each `(name, region, out, (offset, run, stride), verify,
    /// sha256)` of `reads` the region (`None`: the whole tensor) into
    /// `outs[out]`, row after row of `run` bytes `stride` apart from byte
    /// `offset` (a column tile into its columns of a larger tensor), in one
    /// call with the GIL released, checked as `read_regions_into` checks.
    /// `outs` are writable C-contiguous buffers that must not overlap; reads
    /// into one buffer should not overlap each other. On an error the bytes
    /// every read places are zeroed.
    fn read_regions_placed(&self, py: Python<'_>, reads: Vec<PlacedArg>, outs: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
        let r = self.get()?;
        let bufs: Vec<PyBuffer<u8>> =
            outs.iter().enumerate().map(|(k, o)| writable(o, &format!("out {k}"))).collect::<PyResult<_>>()?;
        let spans: Vec<((usize, usize), String)> =
            bufs.iter().enumerate().map(|(k, b)| ((b.buf_ptr() as usize, b.len_bytes()), format!("out {k}"))).collect();
        refuse_overlaps(spans.iter().map(|(at, n)| (*at, n.as_str())), "each needs its own memory")?;
        let mut plans = Vec::with_capacity(reads.len());
        for (name, region, out, (offset, run, stride), verify, sha256) in reads {
            let check = region_check(verify, sha256)?;
            let (start, length) = region_bounds(&r, py, &name, region)?;
            plans.push((name, start, length, out, Placement { offset, run, stride }, check));
        }
        let places: Vec<(usize, usize)> = bufs.iter().map(|b| (b.buf_ptr() as usize, b.len_bytes())).collect();
        py.allow_threads(|| {
            let reads: Vec<PlacedRead<'_>> = plans
                .iter()
                .map(|(name, start, len, buf, place, check)| PlacedRead {
                    name,
                    start,
                    len,
                    buf: *buf,
                    place: *place,
                    check: *check,
                })
                .collect();
            let mut outs: Vec<&mut [u8]> =
                places
                    .iter()
                    // SAFETY: each PyBuffer in `bufs` keeps its exporter's memory
                    // alive and writable until `bufs` is dropped, after this
                    // closure; it is contiguous, `n` bytes long, and no two of
                    // them overlap (checked above). A length of zero needs no
                    // valid address.
                    .map(|&(ptr, n)| {
                        if n == 0 {
                            &mut [][..]
                        } else {
                            unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, n) }
                        }
                    })
                    .collect();
            r.read_regions_placed(&reads, &mut outs)
        })
        .py(py)?;
        drop(bufs);
        Ok(())
    }

    /// A zero-copy view of the tensor's bytes in the mapping (or in the
    /// decompressed blob of a compressed file): read-only, valid while the
    /// view lives, even after `close()`.
    fn region(&self, py: Python<'_>, name: &str) -> PyResult<PyRegion> {
        let r = self.get()?;
        let bytes = r.bytes(name).py(py)?;
        let (ptr, len) = (bytes.as_ptr() as usize, bytes.len());
        Ok(PyRegion { _reader: r, ptr, len })
    }

    /// Reads the whole data blob into one fresh buffer the caller owns
    /// (tensors at their offsets), with parallel positioned reads.
    fn read_all(&self, py: Python<'_>) -> PyResult<PyArena> {
        let r = self.get()?;
        let mut arena = PyArena::new(r.unpacked_len().py(py)? as usize)?;
        // SAFETY: the arena was just made and is not exported yet.
        let buf = unsafe { arena.as_mut_slice() };
        py.allow_threads(|| r.read_data_into(buf)).py(py)?;
        Ok(arena)
    }

    /// Maps the data blob copy-on-write (tensors at their offsets): writable,
    /// writes never reach the file nor any other mapping, valid after
    /// `close()`, and no copy is made. Like every mapping, it sees a
    /// truncation or an in-place rewrite of the file by another program (a
    /// truncation raises SIGBUS on access); replacing the file by a rename,
    /// as our writers do, is safe.
    fn map_all(&self, py: Python<'_>) -> PyResult<PyArena> {
        let r = self.get()?;
        // SAFETY: the contract above is the Python API's documented one
        // (`DtFile.get_tensor`; `copy=True` gives a detached copy).
        let map = unsafe { r.map_private() }.py(py)?;
        Ok(PyArena::from_map(map))
    }

    /// Maps one tensor's bytes copy-on-write, as `map_all` the blob.
    fn map_tensor(&self, py: Python<'_>, name: &str) -> PyResult<PyArena> {
        let r = self.get()?;
        // SAFETY: as in `map_all`.
        let map = unsafe { r.map_tensor_private(name) }.py(py)?;
        Ok(PyArena::from_map(map))
    }

    /// Reads one tensor into a fresh, aligned buffer the caller owns (huge
    /// pages for large tensors), optionally checking its digest.
    #[pyo3(signature = (name, verify = false))]
    fn read_tensor(&self, py: Python<'_>, name: &str, verify: bool) -> PyResult<PyArena> {
        let r = self.get()?;
        let len = r.unpacked_tensor_len(name).py(py)? as usize;
        let mut arena = PyArena::new(len).map_err(|_| {
            // Say whose size it is: a compressed tensor's is what its header
            // declares, however few bytes the file stores.
            let stored = r.header().get(name).map_or(0, |t| t.data_offsets.1 - t.data_offsets.0);
            let note = if stored < len as u64 {
                format!(" (the size its header declares; the file stores it compressed in {stored} bytes)")
            } else {
                String::new()
            };
            pyo3::exceptions::PyMemoryError::new_err(format!("cannot allocate {len} bytes for tensor {name:?}{note}"))
        })?;
        // SAFETY: the arena was just made and is not exported yet.
        let buf = unsafe { arena.as_mut_slice() };
        py.allow_threads(|| {
            r.read_into(name, buf)?;
            if verify {
                r.check_bytes(name, buf)?;
            }
            Ok(())
        })
        .py(py)?;
        Ok(arena)
    }

    /// Reads `len` bytes of the tensor from byte `offset` into a fresh,
    /// aligned buffer the caller owns (slices of big tensors: nothing else
    /// of the tensor is read).
    fn read_range(&self, py: Python<'_>, name: &str, offset: u64, len: usize) -> PyResult<PyArena> {
        let r = self.get()?;
        let mut arena = PyArena::new(len)?;
        // SAFETY: the arena was just made and is not exported yet.
        let buf = unsafe { arena.as_mut_slice() };
        py.allow_threads(|| r.read_range_into(name, offset, buf)).py(py)?;
        Ok(arena)
    }

    /// Statistics of the named tensors (streaming, on all cores), each
    /// `(count, finite, zeros, nan, inf, min, max, mean, std)` with `None`
    /// for the four without finite values, or `None` for a sub-byte dtype.
    #[allow(clippy::type_complexity)]
    fn stats(&self, py: Python<'_>, names: Vec<String>) -> PyResult<Vec<Option<StatsTuple>>> {
        let r = self.get()?;
        let infos = names.iter().map(|n| PyReader::tensor_info(&r, py, n)).collect::<PyResult<Vec<_>>>()?;
        let stats = py.allow_threads(|| deathtensors_io::tensor_stats(&r, &infos, |_| {})).py(py)?;
        Ok(stats
            .into_iter()
            .map(|s| {
                s.map(|s| {
                    let [min, max, mean, std] = s.summary().map_or([None; 4], |v| v.map(Some));
                    (s.count, s.finite, s.zeros, s.nan, s.inf, min, max, mean, std)
                })
            })
            .collect())
    }

    /// Checks the footer and every tensor digest; False if there is none.
    /// io's verdict (`VerifyReport`, the command line's too): True, False
    /// for nothing to check, else the error (`IntegrityError` naming the
    /// first failure, `NoKeyError` for an encrypted file without its key).
    fn verify(&self, py: Python<'_>) -> PyResult<bool> {
        let r = self.get()?;
        py.allow_threads(|| {
            r.check_not_hidden()?;
            r.verify_report(|_| {}, |_| {}, |_| {})?.into_result(&r)
        })
        .py(py)
    }

    fn verify_tensor(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let r = self.get()?;
        py.allow_threads(|| r.verify_tensor(name)).py(py)
    }
}

/// Read-only bytes borrowed from a reader's mapping; keeps the mapping alive.
#[derive(Debug)]
#[pyclass(name = "Region", module = "deathtensors._native", frozen)]
pub struct PyRegion {
    _reader: Arc<Reader>,
    ptr: usize,
    len: usize,
}

#[pymethods]
impl PyRegion {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Exposes the bytes read-only through the buffer protocol.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("the mapping is read-only"));
        }
        let this = slf.get();
        let (ptr, len) = (this.ptr, this.len);
        // SAFETY: filling a Py_buffer per the protocol; `obj` (this region,
        // holding the reader's mapping) keeps the memory valid.
        unsafe { crate::buffer::fill_view(view, flags, slf.into_any(), ptr, len, true) };
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: `view` was filled by `fill_view`.
        unsafe { crate::buffer::release_view(view) }
    }
}
