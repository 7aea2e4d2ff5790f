//! `deathtensors._native.Collection`: appendable collections of rows, the
//! storage of `deathtensors.TensorBlob` (whose file-like API, positions and
//! indexing live in `py_src/deathtensors/_blob.py`).

use std::path::PathBuf;

use deathtensors_io::format::{Dtype, Metadata, RowLayout};
use deathtensors_io::{detect_collection, Collection, CollectionKind, CollectionOptions};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::prelude::*;

use crate::arena::PyArena;
use crate::errors::{error, IntoPy};

/// Reads of at least this many bytes map committed rows instead of copying
/// them (as loads map tensors of 1 MiB and more).
pub(crate) const MAP_MIN: u64 = 1 << 20;

/// One block as Python sees it: path, rows, sha256 hex, committed.
type BlockRow = (PathBuf, u64, Option<String>, bool);

/// The file dtype name ("F32") of a name of ours or torch's ("float32",
/// "bfloat16", "half"), as tensorblob stores them; None if unknown.
#[pyfunction]
pub fn dtype_from_name(name: &str) -> Option<&'static str> {
    deathtensors_io::dtype_from_name(name).map(Dtype::name)
}

/// An open collection; `None` once closed.
#[pyclass(name = "Collection", module = "deathtensors._native")]
#[derive(Debug)]
pub struct PyCollection {
    inner: Option<Collection>,
}

fn options(durable: bool) -> CollectionOptions {
    CollectionOptions { durable }
}

/// Borrows a Python buffer's bytes (C-contiguous) for the duration of `f`,
/// with the GIL released.
fn with_bytes<R: Send>(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> deathtensors_io::Result<R> + Send,
) -> PyResult<R> {
    let buf = PyBuffer::<u8>::get(obj)?;
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err("rows must be a C-contiguous buffer"));
    }
    let (ptr, len) = (buf.buf_ptr() as usize, buf.len_bytes());
    // SAFETY: `buf` keeps the exporter's memory alive and contiguous, `len`
    // bytes long, until it is dropped after this call.
    let result = py.allow_threads(|| f(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }));
    drop(buf);
    result.py(py)
}

impl PyCollection {
    fn get(&self) -> PyResult<&Collection> {
        self.inner.as_ref().ok_or_else(|| PyValueError::new_err("I/O operation on closed collection"))
    }

    fn get_mut(&mut self) -> PyResult<&mut Collection> {
        self.inner.as_mut().ok_or_else(|| PyValueError::new_err("I/O operation on closed collection"))
    }
}

#[pymethods]
impl PyCollection {
    /// Opens a collection (ours or a tensorblob directory) read-only.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<PyCollection> {
        let c = py.allow_threads(|| Collection::open(&path)).py(py)?;
        Ok(PyCollection { inner: Some(c) })
    }

    /// Opens an existing collection for writing, taking its lock.
    #[staticmethod]
    #[pyo3(signature = (path, durable = true))]
    fn open_writable(py: Python<'_>, path: PathBuf, durable: bool) -> PyResult<PyCollection> {
        let c = py.allow_threads(|| Collection::open_writable(&path, options(durable))).py(py)?;
        Ok(PyCollection { inner: Some(c) })
    }

    /// Creates a collection (or replaces an existing one at the next flush).
    #[staticmethod]
    #[pyo3(signature = (path, dtype, shape, block_rows, durable = true))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dtype: &str,
        shape: Vec<u64>,
        block_rows: u64,
        durable: bool,
    ) -> PyResult<PyCollection> {
        let dtype = Dtype::from_name(dtype).ok_or_else(|| error(py, format!("unknown dtype {dtype:?}")))?;
        let layout = RowLayout::new(dtype, shape, block_rows).map_err(|e| error(py, e.to_string()))?;
        let c = py.allow_threads(|| Collection::create(&path, layout, options(durable))).py(py)?;
        Ok(PyCollection { inner: Some(c) })
    }

    /// Deletes our collection at `path` as its writer, under its lock
    /// (io's `remove_collection`): True when the directory is gone, False
    /// when files of others keep it.
    #[staticmethod]
    fn remove(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
        py.allow_threads(|| deathtensors_io::remove_collection(&path)).py(py)
    }

    /// "deathtensors", "tensorblob", or None: what the directory holds.
    #[staticmethod]
    fn detect(path: PathBuf) -> Option<&'static str> {
        match detect_collection(&path) {
            Ok(CollectionKind::Deathtensors) => Some("deathtensors"),
            Ok(CollectionKind::Tensorblob) => Some("tensorblob"),
            Err(_) => None,
        }
    }

    #[getter]
    fn rows(&self) -> PyResult<u64> {
        Ok(self.get()?.rows())
    }

    #[getter]
    fn dtype(&self) -> PyResult<&'static str> {
        Ok(self.get()?.layout().dtype.name())
    }

    #[getter]
    fn shape(&self) -> PyResult<Vec<u64>> {
        Ok(self.get()?.layout().shape.clone())
    }

    #[getter]
    fn block_rows(&self) -> PyResult<u64> {
        Ok(self.get()?.layout().block_rows)
    }

    #[getter]
    fn row_bytes(&self) -> PyResult<u64> {
        Ok(self.get()?.layout().row_bytes())
    }

    #[getter]
    fn generation(&self) -> PyResult<u64> {
        Ok(self.get()?.generation())
    }

    #[getter]
    fn writable(&self) -> PyResult<bool> {
        Ok(self.get()?.is_writable())
    }

    #[getter]
    fn kind(&self) -> PyResult<&'static str> {
        Ok(match self.get()?.kind() {
            CollectionKind::Deathtensors => "deathtensors",
            CollectionKind::Tensorblob => "tensorblob",
        })
    }

    #[getter]
    fn path(&self) -> PyResult<PathBuf> {
        Ok(self.get()?.dir().to_path_buf())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    #[getter]
    fn has_changes(&self) -> PyResult<bool> {
        Ok(self.get()?.has_changes())
    }

    /// Rows `start..start + count` in memory the caller owns: for at least
    /// `MAP_MIN` bytes of committed rows, a copy-on-write mapping of the
    /// block files (no copy, no fresh pages; writes stay in it); otherwise
    /// (or with `copy`) read into fresh memory.
    #[pyo3(signature = (start, count, copy = false))]
    fn read(&self, py: Python<'_>, start: u64, count: u64, copy: bool) -> PyResult<PyArena> {
        let c = self.get()?;
        let len = count.checked_mul(c.layout().row_bytes()).ok_or_else(|| PyValueError::new_err("too many rows"))?;
        if !copy && len >= MAP_MIN {
            // SAFETY: the Python API documents the contract (`TensorBlob.read`,
            // as for loads): block files must not be truncated or rewritten in
            // place by other programs; our writers never change committed rows.
            if let Some(map) = py.allow_threads(|| unsafe { c.map_rows(start, count) }).py(py)? {
                return Ok(PyArena::from_map(map));
            }
        }
        let mut arena = PyArena::new(usize::try_from(len).map_err(|_| PyValueError::new_err("too many rows"))?)?;
        // SAFETY: the arena was just made and is not exported yet.
        let buf = unsafe { arena.as_mut_slice() };
        py.allow_threads(|| c.read_rows(start, buf)).py(py)?;
        Ok(arena)
    }

    /// Reads the rows at `indices` (a buffer of non-negative int64) into
    /// fresh memory, in that order.
    fn gather(&self, py: Python<'_>, indices: &Bound<'_, PyAny>) -> PyResult<PyArena> {
        let c = self.get()?;
        let idx = PyBuffer::<i64>::get(indices)?;
        if !idx.is_c_contiguous() {
            return Err(PyBufferError::new_err("indices must be a C-contiguous int64 buffer"));
        }
        let list: Vec<u64> = idx.to_vec(py)?.into_iter().map(|i| i as u64).collect();
        let len = (list.len() as u64)
            .checked_mul(c.layout().row_bytes())
            .ok_or_else(|| PyValueError::new_err("too many rows"))?;
        let mut arena = PyArena::new(usize::try_from(len).map_err(|_| PyValueError::new_err("too many rows"))?)?;
        // SAFETY: the arena was just made and is not exported yet.
        let buf = unsafe { arena.as_mut_slice() };
        py.allow_threads(|| c.gather(&list, buf)).py(py)?;
        Ok(arena)
    }

    /// A zero-copy mapping of committed rows `start..start + count` (one
    /// block).
    fn view(&self, py: Python<'_>, start: u64, count: u64) -> PyResult<PyArena> {
        let c = self.get()?;
        // SAFETY: the Python API documents the contract (`TensorBlob.view`):
        // block files must not be truncated or rewritten by other programs.
        let view = unsafe { c.view(start, count) }.py(py)?;
        Ok(PyArena::from_map(view.into_map()))
    }

    /// Writes whole rows from `start` (at most the row count): the bytes of
    /// a buffer, or of the one tensor `collect` made of a dict.
    fn write(&mut self, py: Python<'_>, start: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let c = self.get_mut()?;
        if let Ok(tensors) = data.downcast::<crate::tensors::Tensors>() {
            let n = tensors.len()?;
            if n != 1 {
                return Err(PyValueError::new_err(format!("rows must be one tensor, got {n}")));
            }
            return crate::tensors::with_tensors(py, data, None, |items| c.write_rows(start, items[0].1));
        }
        with_bytes(py, data, |bytes| c.write_rows(start, bytes))
    }

    fn truncate(&mut self, py: Python<'_>, rows: u64) -> PyResult<()> {
        let c = self.get_mut()?;
        py.allow_threads(|| c.truncate(rows)).py(py)
    }

    /// Appends `other`'s rows in order.
    fn extend_rows(&mut self, py: Python<'_>, other: &PyCollection) -> PyResult<()> {
        let o = other.get()?;
        let c = self.get_mut()?;
        py.allow_threads(|| c.extend_rows(o)).py(py)
    }

    /// Appends `other`'s blocks as tensorblob's unordered extend does.
    fn extend_blocks(&mut self, py: Python<'_>, other: &PyCollection) -> PyResult<()> {
        let o = other.get()?;
        let c = self.get_mut()?;
        py.allow_threads(|| c.extend_blocks(o)).py(py)
    }

    fn flush(&mut self, py: Python<'_>) -> PyResult<()> {
        let c = self.get_mut()?;
        py.allow_threads(|| c.flush()).py(py)
    }

    /// Rereads the manifest (readers); whether the state changed.
    fn refresh(&mut self, py: Python<'_>) -> PyResult<bool> {
        let c = self.get_mut()?;
        py.allow_threads(|| c.refresh()).py(py)
    }

    /// Checks every block; returns how many had their digest checked.
    fn verify(&self, py: Python<'_>) -> PyResult<u64> {
        let c = self.get()?;
        py.allow_threads(|| c.verify()).py(py)
    }

    /// Flushes a writer, then releases the files and the lock. Idempotent.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(c) = self.inner.as_mut() {
            if c.is_writable() {
                py.allow_threads(|| c.flush()).py(py)?;
            }
        }
        self.inner = None;
        Ok(())
    }

    /// Commits and releases the lock, staying open read-only (what
    /// `TensorBlob.close` does: tensorblob's blobs can still be indexed
    /// after close).
    fn release_writer(&mut self, py: Python<'_>) -> PyResult<()> {
        let c = self.get_mut()?;
        py.allow_threads(|| c.release_writer()).py(py)
    }

    /// Copies this collection into a new one at `output` (one commit;
    /// nothing left there on failure); returns the rows.
    #[pyo3(signature = (output, block_rows = None))]
    fn convert_to(&self, py: Python<'_>, output: PathBuf, block_rows: Option<u64>) -> PyResult<u64> {
        let c = self.get()?;
        py.allow_threads(|| deathtensors_io::convert_collection(c, &output, block_rows)).py(py)
    }

    /// Releases the files and the lock without committing.
    fn abandon(&mut self) {
        self.inner = None;
    }

    /// `(path, rows, sha256 hex or None, committed)` per block.
    fn blocks(&self) -> PyResult<Vec<BlockRow>> {
        Ok(self
            .get()?
            .blocks()
            .into_iter()
            .map(|b| (b.path, b.rows, b.sha256.map(|d| deathtensors_io::format::hex_digest(&d)), b.committed))
            .collect())
    }

    #[getter]
    fn metadata(&self) -> PyResult<Metadata> {
        Ok(self.get()?.metadata().clone())
    }

    #[setter]
    fn set_metadata(&mut self, py: Python<'_>, metadata: Metadata) -> PyResult<()> {
        self.get_mut()?.set_metadata(metadata).py(py)
    }
}
