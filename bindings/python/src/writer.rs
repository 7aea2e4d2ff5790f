//! `deathtensors._native.save`: streaming, atomic writes from Python buffers.

use deathtensors_io::format::{Format, Metadata, TensorSpec};
use deathtensors_io::{save as io_save, WriteOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::tensors::Tensors;

/// One tensor as Python hands it over: name, dtype name, shape, a
/// C-contiguous byte buffer, and per-tensor metadata.
pub(crate) type Item<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>, Option<Metadata>);

/// The writers' `tensors` argument: what `_native.collect` made of a dict,
/// or a list of items.
pub(crate) fn tensors_arg(tensors: &Bound<'_, PyAny>) -> PyResult<TensorsArg> {
    if let Ok(collected) = tensors.downcast::<Tensors>() {
        return Ok(TensorsArg::Collected(collected.clone().unbind()));
    }
    let items: Vec<Item<'_>> = tensors.extract()?;
    let mut out = Tensors::with_capacity(items.len());
    for (name, dtype, shape, obj, metadata) in items {
        out.push_buffer(name, &dtype, shape, &obj, metadata)?;
    }
    Ok(TensorsArg::Owned(out))
}

/// See [`tensors_arg`].
pub(crate) enum TensorsArg {
    Collected(Py<Tensors>),
    Owned(Tensors),
}

/// Runs `write` on the tensors' specs and bytes with the GIL released,
/// borrowing each buffer's memory without a copy.
pub(crate) fn with_tensors<R: Send>(
    py: Python<'_>,
    tensors: &Bound<'_, PyAny>,
    write: impl FnOnce(Vec<(TensorSpec, &[u8])>) -> deathtensors_io::Result<R> + Send,
) -> PyResult<R> {
    let mut arg = tensors_arg(tensors)?;
    let mut guard;
    let tensors: &mut Tensors = match &mut arg {
        TensorsArg::Owned(t) => t,
        TensorsArg::Collected(t) => {
            guard = t.bind(py).try_borrow_mut()?;
            &mut guard
        }
    };
    let (specs, bytes) = tensors.take();
    let result = py.allow_threads(|| {
        let data = specs
            .into_iter()
            .zip(bytes)
            // SAFETY: `tensors` keeps each exporter's buffer (or torch
            // tensor) alive and its memory contiguous, `len` bytes long,
            // until it is dropped, after this closure returns. A length of
            // zero needs no valid address.
            .map(|(s, (ptr, len))| {
                let bytes: &[u8] =
                    if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(ptr as *const u8, len) } };
                (s, bytes)
            })
            .collect();
        write(data)
    });
    drop(arg);
    result.py(py)
}

/// Parses the `compress` and `compress_level` arguments: `"off"`,
/// `"chunks"` (per-tensor, flag bit 5) or `"blob"` (deathtensors 0.3.0's
/// whole-blob frame).
pub(crate) fn parse_compress(compress: &str, level: i32) -> PyResult<deathtensors_io::Compress> {
    use deathtensors_io::Compress;
    if !(1..=22).contains(&level) {
        return Err(PyValueError::new_err(format!("compress_level must be an integer from 1 to 22, got {level}")));
    }
    match compress {
        "off" => Ok(Compress::Off),
        "chunks" => Ok(Compress::Chunked { level }),
        "blob" => Ok(Compress::Blob { level }),
        other => Err(PyValueError::new_err(format!("unknown compress mode {other:?}: use 'off', 'chunks' or 'blob'"))),
    }
}

/// Parses the `format` argument.
pub(crate) fn parse_format(format: &str) -> PyResult<Format> {
    match format {
        "deathtensors" => Ok(Format::Deathtensors),
        "safetensors" => Ok(Format::Safetensors),
        "bintensors" => Ok(Format::Bintensors),
        other => Err(PyValueError::new_err(format!(
            "unknown format {other:?}: use 'deathtensors', 'safetensors' or 'bintensors'"
        ))),
    }
}

/// Saves tensors (a list of items, or what `collect` made of a dict)
/// atomically. The buffers' memory goes to the file without a
/// copy, with the GIL released; they must not be modified meanwhile.
#[pyfunction]
#[pyo3(signature = (path, tensors, global_metadata = None, checksum = false, durable = true, format = "deathtensors", alignment = 64, encrypt = None, sign = None, cipher = "AES-256-GCM", chunk_size = 1 << 20, seal_header = false, compress = "off", compress_level = 3))]
#[allow(clippy::too_many_arguments)]
pub fn save(
    py: Python<'_>,
    path: std::path::PathBuf,
    tensors: Bound<'_, PyAny>,
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
    compress: &str,
    compress_level: i32,
) -> PyResult<()> {
    let format = parse_format(format)?;
    let compress = parse_compress(compress, compress_level)?;
    let mut options = WriteOptions {
        format,
        checksum,
        durable,
        metadata: global_metadata,
        alignment,
        compress,
        ..WriteOptions::default()
    };
    crate::keys::apply(py, &mut options, encrypt, sign, cipher, chunk_size, seal_header)?;
    with_tensors(py, &tensors, |data| io_save(&path, data, &options).map(|_| ()))?;
    Ok(())
}
