//! The in-memory halves of the safetensors drop-in
//! (`deathtensors.safetensors`): `serialize` and `deserialize` work on
//! `bytes`, not files, so they need the format crate directly. Files go
//! through `Reader` and `save` like everything else.

use deathtensors_io::format::{Dtype, Flags, Format, Head, Header, Limits, Metadata, TensorSpec};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::format_to_py;

/// One tensor as Python hands it over: name, dtype name, shape and a
/// C-contiguous byte buffer.
type Item<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>);

/// Encodes a whole safetensors file into a new `bytes` object, laid out
/// exactly as safetensors 0.8.0 does (and as `save(..., format="safetensors")`
/// writes it). The copy of the tensor bytes runs with the GIL released; the
/// buffers must not be modified meanwhile.
#[pyfunction]
#[pyo3(signature = (tensors, metadata = None))]
pub fn encode_safetensors<'py>(
    py: Python<'py>,
    tensors: Vec<Item<'py>>,
    metadata: Option<Metadata>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut specs = Vec::with_capacity(tensors.len());
    let mut buffers = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, obj) in tensors {
        let dtype = Dtype::from_name(&dtype)
            .ok_or_else(|| PyValueError::new_err(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
        let buf = PyBuffer::<u8>::get(&obj)?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("tensor {name:?}: buffer is not C-contiguous")));
        }
        buffers.push((name.clone(), buf));
        specs.push(TensorSpec::new(name, dtype, shape));
    }
    let header = Header::new_safetensors(specs, metadata, &Limits::DEFAULT).map_err(|e| format_to_py(py, e))?;
    let head = Head::encode(&header, Flags::EMPTY).map_err(|e| format_to_py(py, e))?;
    // Where each buffer goes: (destination offset, source address, length).
    let mut copies = Vec::with_capacity(buffers.len());
    for (name, buf) in &buffers {
        // Every name is in the header: it was built from these specs.
        let info =
            header.get(name).ok_or_else(|| PyValueError::new_err(format!("tensor {name:?} was not laid out")))?;
        if buf.len_bytes() as u64 != info.byte_len() {
            return Err(PyValueError::new_err(format!(
                "tensor {name:?}: {} {:?} takes {} bytes, but its buffer holds {}",
                info.dtype.name(),
                info.shape,
                info.byte_len(),
                buf.len_bytes()
            )));
        }
        copies.push((head.len() + info.data_offsets.0 as usize, buf.buf_ptr() as usize, buf.len_bytes()));
    }
    let total = usize::try_from(header.data_len())
        .ok()
        .and_then(|n| n.checked_add(head.len()))
        .ok_or_else(|| PyValueError::new_err("the file would not fit in memory"))?;
    let bytes = PyBytes::new_with(py, total, |out| {
        out[..head.len()].copy_from_slice(&head);
        // The bytes object is not visible to other threads yet.
        py.allow_threads(|| {
            for &(at, ptr, len) in &copies {
                // SAFETY: each `PyBuffer` in `buffers` keeps its exporter's
                // memory alive and contiguous until it is dropped, after this
                // closure returns; `len` is its length in bytes.
                let src = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
                out[at..at + len].copy_from_slice(src);
            }
        });
        Ok(())
    })?;
    drop(buffers);
    Ok(bytes)
}

/// A file held in memory, for the io `Reader` (which needs a `'static`
/// source): the address and length of bytes that outlive every reader
/// made over them (see `parse_head`).
#[derive(Debug)]
struct Borrowed {
    ptr: usize,
    len: usize,
}

impl deathtensors_io::ReadAt for Borrowed {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        // SAFETY: `parse_head` makes this from a slice it holds borrowed for
        // as long as the reader over it lives (the reader is dropped first).
        let data = unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) };
        let range = usize::try_from(offset).ok().and_then(|start| Some(start..start.checked_add(buf.len())?));
        match range.and_then(|r| data.get(r)) {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end of the bytes")),
        }
    }
}

/// The head of a file held in memory, as `parse_head` returns it (it was
/// a positional 5-tuple): its `format`, global `metadata` (or None),
/// whether its tensors are `compressed` (then the bytes at their offsets
/// are not theirs), `tensors` as `(name, dtype, shape, (start, end))` rows
/// in header order (rows, as `Reader.layout` gives, for files of many
/// tensors), offsets relative to `data_start`.
#[derive(Debug)]
#[pyclass(name = "Head", module = "deathtensors._native", frozen, get_all)]
pub struct PyHead {
    format: &'static str,
    metadata: Option<Py<PyDict>>,
    compressed: bool,
    tensors: Py<PyList>,
    data_start: u64,
}

/// Parses the head of a file held in memory (any format we read).
///
/// The bytes are opened by the same `Reader` as a file on disk, so they get
/// the same checks (signature block, footer, padding, tag table, header
/// MAC); an encrypted or cryptotensors file is refused, as its bytes are
/// ciphertext (`deathtensors.open` with keys reads it).
#[pyfunction]
pub fn parse_head(py: Python<'_>, data: &[u8]) -> PyResult<PyHead> {
    let source = Borrowed { ptr: data.as_ptr() as usize, len: data.len() };
    let reader = deathtensors_io::Reader::open_source(
        Box::new(source),
        data.len() as u64,
        "<bytes>",
        deathtensors_io::ReadOptions::default(),
    )
    .map_err(|e| crate::errors::to_py(py, e))?;
    if reader.is_encrypted() || reader.is_sealed() || reader.is_cryptotensors() {
        return Err(crate::errors::error(
            py,
            "the file is encrypted: its bytes are ciphertext; open it with deathtensors.open(path, keys=...)".into(),
        ));
    }
    let head = reader.head();
    let header = &head.header;
    let format = match header.format() {
        Format::Deathtensors => "deathtensors",
        Format::Safetensors => "safetensors",
        Format::Bintensors => "bintensors",
    };
    let metadata = match header.metadata() {
        Some(m) => {
            let d = PyDict::new(py);
            for (k, v) in m {
                d.set_item(k, v)?;
            }
            Some(d)
        }
        None => None,
    };
    let tensors = PyList::empty(py);
    for t in header.tensors() {
        tensors.append((t.name.as_str(), t.dtype.name(), t.shape.to_vec(), t.data_offsets))?;
    }
    // Either compression (a 0.3.0 blob, or tensors in chunks) means the
    // bytes at `data_offsets` are not the tensors'.
    let compressed = head.is_compressed() || head.is_chunk_compressed();
    let out = PyHead {
        format,
        metadata: metadata.map(Bound::unbind),
        compressed,
        tensors: tensors.unbind(),
        data_start: head.data_start,
    };
    // The reader (and its borrowed source) goes before `data` can.
    drop(reader);
    Ok(out)
}
