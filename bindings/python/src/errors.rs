//! The only place errors are mapped to Python exceptions. The exception
//! classes are defined in `deathtensors/errors.py` (so they can inherit from
//! both `DeathTensorsError` and `KeyError`); OS errors become `OSError`
//! subclasses by errno (`FileNotFoundError`, `PermissionError`, ...).

use deathtensors_io::{Error, ErrorKind};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("deathtensors.errors")?.getattr(name)
}

pub(crate) fn raise(py: Python<'_>, name: &str, message: String) -> PyErr {
    match class(py, name).and_then(|c| c.call1((message.clone(),))) {
        Ok(exc) => PyErr::from_value(exc),
        Err(_) => PyValueError::new_err(message),
    }
}

/// Converts an io error to the matching Python exception.
pub fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let message = err.to_string();
    match err.kind() {
        ErrorKind::Io(e) => match e.raw_os_error() {
            // OSError(errno, strerror, filename) picks the subclass by errno.
            Some(errno) => {
                // OSError adds the file name itself: give it the bare reason.
                let reason = std::io::Error::from_raw_os_error(errno).to_string();
                let reason = reason.split(" (os error").next().unwrap_or(&reason).to_string();
                let filename = err.path().map(|p| p.to_string_lossy().into_owned());
                PyOSError::new_err((errno, format!("{}: {reason}", err.doing()), filename))
            }
            // No errno (a remote object's error): the subclass by kind.
            None => match e.kind() {
                std::io::ErrorKind::NotFound => pyo3::exceptions::PyFileNotFoundError::new_err(message),
                std::io::ErrorKind::PermissionDenied => pyo3::exceptions::PyPermissionError::new_err(message),
                std::io::ErrorKind::TimedOut => pyo3::exceptions::PyTimeoutError::new_err(message),
                std::io::ErrorKind::IsADirectory => pyo3::exceptions::PyIsADirectoryError::new_err(message),
                _ => PyOSError::new_err(message),
            },
        },
        ErrorKind::Format(_)
        | ErrorKind::Decompress(_)
        | ErrorKind::DecompressChunk { .. }
        | ErrorKind::DamagedCollection(_)
        | ErrorKind::InvalidCheckpoint(_) => raise(py, "FormatError", message),
        ErrorKind::ChecksumMismatch { .. }
        | ErrorKind::TensorDigestMismatch { .. }
        | ErrorKind::BlockDigestMismatch { .. }
        | ErrorKind::TagTableMismatch
        | ErrorKind::ModelMismatch(_) => raise(py, "IntegrityError", message),
        ErrorKind::NoKey { .. } => raise(py, "NoKeyError", message),
        ErrorKind::Decrypt { .. } => raise(py, "DecryptionError", message),
        ErrorKind::BadSignature { .. }
        | ErrorKind::Unsigned
        | ErrorKind::SignerKeyNeeded { .. }
        | ErrorKind::UntrustedSigner { .. }
        | ErrorKind::ModelSignature(_) => raise(py, "SignatureError", message),
        ErrorKind::NotEncrypted => raise(py, "NotEncryptedError", message),
        ErrorKind::PolicyDenied(_) => raise(py, "PolicyDeniedError", message),
        ErrorKind::TensorNotFound(_) => raise(py, "TensorNotFoundError", message),
        ErrorKind::NoChecksum { .. } => raise(py, "NoChecksumError", message),
        ErrorKind::Locked(_) => raise(py, "LockedError", message),
        _ => raise(py, "DeathTensorsError", message),
    }
}

/// A `DeathTensorsError` with this message, for bad arguments that only the
/// native layer can judge (keys, ciphers).
pub fn error(py: Python<'_>, message: String) -> PyErr {
    raise(py, "DeathTensorsError", message)
}

/// Converts a format error (from encoding or parsing bytes in memory) to
/// `FormatError`.
pub fn format_to_py(py: Python<'_>, err: deathtensors_io::format::Error) -> PyErr {
    raise(py, "FormatError", err.to_string())
}

/// `Result<T, io::Error>` to `PyResult<T>`.
pub trait IntoPy<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}
