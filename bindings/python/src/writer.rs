//! `deathtensors._native.save`: streaming, atomic writes from Python buffers.

use deathtensors_io::format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{save as io_save, WriteOptions};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// One tensor as Python hands it over: name, dtype name, shape, a
/// C-contiguous byte buffer, and per-tensor metadata.
pub(crate) type Item<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>, Option<Metadata>);

/// Turns Python items into specs and the buffers that keep their memory alive.
fn collect(tensors: Vec<Item<'_>>) -> PyResult<(Vec<TensorSpec>, Vec<PyBuffer<u8>>)> {
    let mut specs = Vec::with_capacity(tensors.len());
    let mut buffers = Vec::with_capacity(tensors.len());
    for (name, dtype, shape, obj, metadata) in tensors {
        let dtype = Dtype::from_name(&dtype)
            .ok_or_else(|| PyValueError::new_err(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
        let buf = PyBuffer::<u8>::get(&obj)?;
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("tensor {name:?}: buffer is not C-contiguous")));
        }
        let mut spec = TensorSpec::new(name, dtype, shape);
        spec.metadata = metadata.unwrap_or_default();
        specs.push(spec);
        buffers.push(buf);
    }
    Ok((specs, buffers))
}

/// Runs `write` on the tensors' specs and bytes with the GIL released,
/// borrowing each buffer's memory without a copy.
pub(crate) fn with_tensors<R: Send>(
    py: Python<'_>,
    tensors: Vec<Item<'_>>,
    write: impl FnOnce(Vec<(TensorSpec, &[u8])>) -> deathtensors_io::Result<R> + Send,
) -> PyResult<R> {
    let (specs, buffers) = collect(tensors)?;
    let result = py.allow_threads(|| {
        let data = specs
            .into_iter()
            .zip(&buffers)
            // SAFETY: each `PyBuffer` keeps its exporter's memory alive and
            // contiguous, `len_bytes` long, until `buffers` is dropped below,
            // after this closure returns.
            .map(|(s, b)| (s, unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) }))
            .collect();
        write(data)
    });
    drop(buffers);
    result.py(py)
}

/// Parses the `format` argument.
pub(crate) fn parse_format(format: &str) -> PyResult<Format> {
    match format {
        "deathtensors" => Ok(Format::Deathtensors),
        "safetensors" => Ok(Format::Safetensors),
        other => Err(PyValueError::new_err(format!("unknown format {other:?}: use 'deathtensors' or 'safetensors'"))),
    }
}

/// Saves tensors atomically. The buffers' memory goes to the file without a
/// copy, with the GIL released; they must not be modified meanwhile.
#[pyfunction]
#[pyo3(signature = (path, tensors, global_metadata = None, checksum = false, durable = true, format = "deathtensors", alignment = 64, encrypt = None, sign = None, cipher = "AES-256-GCM", chunk_size = 1 << 20, seal_header = false))]
#[allow(clippy::too_many_arguments)]
pub fn save(
    py: Python<'_>,
    path: std::path::PathBuf,
    tensors: Vec<Item<'_>>,
    global_metadata: Option<Metadata>,
    checksum: bool,
    durable: bool,
    format: &str,
    alignment: u64,
    encrypt: Option<crate::keys::PyKeyRing>,
    sign: Option<crate::keys::PyKeyRing>,
    cipher: &str,
    chunk_size: u64,
    seal_header: bool,
) -> PyResult<()> {
    let format = parse_format(format)?;
    let mut options =
        WriteOptions { format, checksum, durable, metadata: global_metadata, alignment, ..WriteOptions::default() };
    crate::keys::apply(py, &mut options, encrypt, sign, cipher, chunk_size, seal_header)?;
    with_tensors(py, tensors, |data| io_save(&path, data, &options).map(|_| ()))?;
    Ok(())
}
