//! `deathtensors._native.save`: streaming, atomic writes from Python buffers.

use deathtensors_io::format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{save as io_save, WriteOptions};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// One tensor as Python hands it over: name, dtype name, shape, a
/// C-contiguous byte buffer, and per-tensor metadata.
type Item<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>, Option<Metadata>);

/// Saves tensors atomically. The buffers' memory goes to the file without a
/// copy, with the GIL released; they must not be modified meanwhile.
#[pyfunction]
#[pyo3(signature = (path, tensors, global_metadata = None, checksum = false, durable = true, format = "deathtensors", alignment = 64))]
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
) -> PyResult<()> {
    let format = match format {
        "deathtensors" => Format::Deathtensors,
        "safetensors" => Format::Safetensors,
        other => {
            return Err(PyValueError::new_err(format!("unknown format {other:?}: use 'deathtensors' or 'safetensors'")))
        }
    };
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
    let regions: Vec<(usize, usize)> = buffers.iter().map(|b| (b.buf_ptr() as usize, b.len_bytes())).collect();
    let options =
        WriteOptions { format, checksum, durable, metadata: global_metadata, alignment, ..WriteOptions::default() };
    py.allow_threads(|| {
        let data: Vec<(TensorSpec, &[u8])> = specs
            .into_iter()
            .zip(&regions)
            // SAFETY: each `PyBuffer` in `buffers` keeps its exporter's
            // memory alive and contiguous until it is dropped, after this
            // closure returns.
            .map(|(s, &(ptr, len))| (s, unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }))
            .collect();
        io_save(&path, data, &options).map(|_| ())
    })
    .py(py)?;
    drop(buffers);
    Ok(())
}
