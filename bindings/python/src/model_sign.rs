//! OpenSSF model signing of directories (`deathtensors_io::sign_model`),
//! for `deathtensors._model_sign`.

use std::path::PathBuf;

use deathtensors_io::{EcPublicKey, EcSigningKey, ModelSigner, ModelVerifier, SignModelOptions, SignedModel};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy as _;

fn to_dict<'py>(py: Python<'py>, model: &SignedModel) -> PyResult<Bound<'py, PyDict>> {
    let files = PyDict::new(py);
    for f in &model.files {
        files.set_item(&f.name, deathtensors_io::format::hex_digest(&f.sha256))?;
    }
    let out = PyDict::new(py);
    out.set_item("name", &model.name)?;
    out.set_item("files", files)?;
    out.set_item("ignore_paths", &model.ignore_paths)?;
    Ok(out)
}

/// Signs `model_dir` into the bundle `signature` with a PEM ECDSA key;
/// with `certificate_chain` (the signing certificate first), in
/// certificate mode.
#[pyfunction]
#[pyo3(signature = (model_dir, key, signature, certificate_chain = None, ignore_paths = None, allow_symlinks = false))]
pub fn sign_model<'py>(
    py: Python<'py>,
    model_dir: PathBuf,
    key: PathBuf,
    signature: PathBuf,
    certificate_chain: Option<Vec<PathBuf>>,
    ignore_paths: Option<Vec<String>>,
    allow_symlinks: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let model = py
        .allow_threads(|| {
            let key = EcSigningKey::from_pem_file(&key)?;
            let signer = match certificate_chain {
                Some(chain) => ModelSigner::certificate(key, &chain)?,
                None => ModelSigner::Key(key),
            };
            let options = SignModelOptions { ignore_paths: ignore_paths.unwrap_or_default(), allow_symlinks };
            deathtensors_io::sign_model(&model_dir, &signer, &signature, &options)
        })
        .py(py)?;
    to_dict(py, &model)
}

/// A verified model signature's per-tensor commitments: files opened with
/// it (`ReadOptions(signed_model=...)`) are checked head on open, tensors
/// on read.
#[derive(Debug)]
#[pyclass(name = "SignedModel", module = "deathtensors._native", frozen)]
pub struct PySignedModel {
    pub(crate) inner: std::sync::Arc<deathtensors_io::ModelCommitments>,
}

#[pymethods]
impl PySignedModel {
    /// The model directory (resolved).
    #[getter]
    fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The files with per-tensor commitments, relative to the directory.
    fn files(&self) -> Vec<String> {
        self.inner.files().map(str::to_string).collect()
    }
}

fn verifier(
    public_key: Option<PathBuf>,
    certificate_chain: Option<Vec<PathBuf>>,
) -> deathtensors_io::Result<ModelVerifier> {
    match (public_key, certificate_chain) {
        (Some(key), _) => Ok(ModelVerifier::Key(EcPublicKey::from_pem_file(&key)?)),
        (None, Some(chain)) => ModelVerifier::certificates(&chain),
        (None, None) => ModelVerifier::certificates(&[]),
    }
}

/// Checks the bundle `signature` of `model_dir` (no file of the directory
/// is read) and returns its per-tensor commitments.
#[pyfunction]
#[pyo3(signature = (model_dir, signature, public_key = None, certificate_chain = None))]
pub fn open_signed_model(
    py: Python<'_>,
    model_dir: PathBuf,
    signature: PathBuf,
    public_key: Option<PathBuf>,
    certificate_chain: Option<Vec<PathBuf>>,
) -> PyResult<PySignedModel> {
    let inner = py
        .allow_threads(|| {
            deathtensors_io::open_signed_model(&model_dir, &verifier(public_key, certificate_chain)?, &signature)
        })
        .py(py)?;
    Ok(PySignedModel { inner: std::sync::Arc::new(inner) })
}

/// Verifies `model_dir` against the bundle `signature`: with a PEM public
/// key, or with trusted PEM certificates.
#[pyfunction]
#[pyo3(signature = (model_dir, signature, public_key = None, certificate_chain = None))]
pub fn verify_model<'py>(
    py: Python<'py>,
    model_dir: PathBuf,
    signature: PathBuf,
    public_key: Option<PathBuf>,
    certificate_chain: Option<Vec<PathBuf>>,
) -> PyResult<Bound<'py, PyDict>> {
    let model = py
        .allow_threads(|| {
            deathtensors_io::verify_model(&model_dir, &verifier(public_key, certificate_chain)?, &signature)
        })
        .py(py)?;
    to_dict(py, &model)
}
