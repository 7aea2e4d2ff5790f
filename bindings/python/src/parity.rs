//! What deathtensors 0.3.0's API adds over the reader and the writer:
//! `append`, `diff`, the manifest sidecar and 0.3.0's sharded layout. The
//! work is in `deathtensors-io`; this translates arguments and results.

use std::path::PathBuf;

use deathtensors_io::format::{Format, Metadata, TensorSpec};
use deathtensors_io::{Compare, Reader};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy;
use crate::options::PyWriteOptions;
use crate::reader::PyReader;
use crate::tensors::with_tensors;

/// Every dtype name of the format, in the format's order.
#[pyfunction]
pub fn supported_dtypes() -> Vec<&'static str> {
    deathtensors_io::format::Dtype::ALL.iter().map(|d| d.name()).collect()
}

/// Adds tensors (a list of items, or what `collect` made of a dict) to the
/// file at `path`: a streaming copy that replaces it atomically.
#[pyfunction]
#[pyo3(signature = (path, tensors, extra_global_metadata = None, durable = true, metadata = None))]
pub fn append(
    py: Python<'_>,
    path: PathBuf,
    tensors: Bound<'_, PyAny>,
    extra_global_metadata: Option<Metadata>,
    durable: bool,
    metadata: Option<Bound<'_, PyDict>>,
) -> PyResult<()> {
    with_tensors(py, &tensors, metadata.as_ref(), |data| {
        deathtensors_io::append(&path, data, extra_global_metadata.as_ref(), durable)
    })
}

/// What `diff` found between two files, fields named (it was a positional
/// 6-tuple): names `removed`, `added` and `retyped` (another dtype or
/// shape); `values` as `(name, differing elements, max_abs_diff)` rows;
/// the global `metadata` changes and each tensor's (`tensor_metadata`) as
/// `(key, a, b)` rows.
#[derive(Debug)]
#[pyclass(name = "Diff", module = "deathtensors._native", frozen, get_all)]
pub struct PyDiff {
    removed: Vec<String>,
    added: Vec<String>,
    retyped: Vec<String>,
    values: Vec<(String, u64, Option<f64>)>,
    metadata: Vec<MetadataChange>,
    tensor_metadata: Vec<(String, Vec<MetadataChange>)>,
}

type MetadataChange = (String, Option<String>, Option<String>);

fn change(c: deathtensors_io::MetadataChange) -> MetadataChange {
    (c.key, c.a, c.b)
}

/// Compares two open files (values exactly, or within `atol`/`rtol`).
#[pyfunction]
#[pyo3(signature = (a, b, atol = None, rtol = None))]
pub fn diff(
    py: Python<'_>,
    a: PyRef<'_, PyReader>,
    b: PyRef<'_, PyReader>,
    atol: Option<f64>,
    rtol: Option<f64>,
) -> PyResult<PyDiff> {
    let compare = Compare::tolerances(atol, rtol).map_err(|m| crate::errors::error(py, m))?;
    let (ra, rb) = (a.get()?, b.get()?);
    let d = py.allow_threads(|| deathtensors_io::diff(&*ra, &*rb, compare, |_| {})).py(py)?;
    Ok(PyDiff {
        removed: d.removed,
        added: d.added,
        retyped: d.retyped,
        values: d.values.into_iter().map(|(n, v)| (n, v.differing, v.max_abs_diff)).collect(),
        metadata: d.metadata.into_iter().map(change).collect(),
        tensor_metadata: d.tensor_metadata.into_iter().map(|(n, c)| (n, c.into_iter().map(change).collect())).collect(),
    })
}

/// The JSON manifest of an open file (`deathtensors_io::manifest`).
#[pyfunction]
pub fn manifest(reader: PyRef<'_, PyReader>) -> PyResult<String> {
    Ok(deathtensors_io::manifest(&*reader.get()?, env!("CARGO_PKG_VERSION")))
}

/// Writes the manifest of an open file to `out` (default: its path +
/// `.json`) atomically; returns where.
#[pyfunction]
#[pyo3(signature = (reader, out = None, durable = true))]
pub fn write_manifest(
    py: Python<'_>,
    reader: PyRef<'_, PyReader>,
    out: Option<PathBuf>,
    durable: bool,
) -> PyResult<PathBuf> {
    let r = reader.get()?;
    py.allow_threads(|| deathtensors_io::write_manifest(&r, out.as_deref(), env!("CARGO_PKG_VERSION"), durable)).py(py)
}

/// Converts the file at `src` into `options.format` at `dst`, streaming
/// and atomically (compressed as `options.compress` says), with
/// `options.metadata` as the new file's global metadata. Per-tensor
/// metadata is kept where the format has it.
#[pyfunction]
pub fn convert(py: Python<'_>, src: PathBuf, dst: PathBuf, options: Bound<'_, PyWriteOptions>) -> PyResult<()> {
    let options = &options.get().inner;
    let format = options.format;
    py.allow_threads(|| {
        let reader = Reader::open(&src)?;
        let specs = reader
            .header()
            .tensors()
            .iter()
            .map(|t| {
                let spec = TensorSpec { sha256: None, ..t.to_spec() };
                match format {
                    Format::Deathtensors => spec,
                    _ => TensorSpec { metadata: Metadata::new(), ..spec },
                }
            })
            .collect();
        deathtensors_io::copy_tensors(|_| Ok(&reader), &dst, specs, options, |_| {})
    })
    .py(py)
}

/// Saves tensors in deathtensors 0.3.0's sharded layout, as `options` say:
/// the index file at `path`, the shards beside it. Returns the shard paths.
#[pyfunction]
#[pyo3(signature = (path, tensors, max_shard_bytes, options, metadata = None))]
pub fn save_sharded_legacy(
    py: Python<'_>,
    path: PathBuf,
    tensors: Bound<'_, PyAny>,
    max_shard_bytes: u64,
    options: Bound<'_, PyWriteOptions>,
    metadata: Option<Bound<'_, PyDict>>,
) -> PyResult<Vec<PathBuf>> {
    let options = &options.get().inner;
    with_tensors(py, &tensors, metadata.as_ref(), |data| {
        deathtensors_io::save_sharded_legacy(&path, data, max_shard_bytes, options)
    })
}
