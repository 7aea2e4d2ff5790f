//! The only place errors are mapped to Python exceptions, and where the
//! exception classes are made: once, when `_native` is imported (two of
//! them inherit from two bases, `KeyError` and `BlockingIOError`, which
//! pyo3's `create_exception!` cannot say). `deathtensors/errors.py`
//! re-exports them; their `__module__` is `deathtensors.errors`, where
//! users and pickle find them. OS errors become `OSError` subclasses by
//! errno (`FileNotFoundError`, `PermissionError`, ...).

use deathtensors_io::{Error, ErrorKind};
use pyo3::exceptions::{PyBaseException, PyBlockingIOError, PyKeyError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyTuple, PyType};

/// One exception class: its name, its bases (earlier classes of
/// [`CLASSES`] by name, or a builtin), and its docstring.
struct Class {
    name: &'static str,
    bases: &'static [&'static str],
    doc: &'static str,
}

/// The exception classes, bases before the classes that derive from them.
const CLASSES: &[Class] = &[
    Class { name: "DeathTensorsError", bases: &["ValueError"], doc: "Base class of the errors of deathtensors." },
    Class {
        name: "FormatError",
        bases: &["DeathTensorsError"],
        doc: "The file is malformed or hostile (the message says what and where).",
    },
    Class {
        name: "IntegrityError",
        bases: &["DeathTensorsError"],
        doc: "A SHA-256 footer or a tensor digest does not match the file's bytes.",
    },
    Class {
        name: "DecryptionError",
        bases: &["DeathTensorsError"],
        doc: "An encrypted file or tensor could not be decrypted: a wrong key, or\n\
              data or a header that were changed. Says where, deliberately not why.",
    },
    Class {
        name: "NoKeyError",
        bases: &["DecryptionError"],
        doc: "The file is encrypted and no key given is one of its recipients (the\n\
              message lists them).",
    },
    Class {
        name: "SignatureError",
        bases: &["IntegrityError"],
        doc: "A signature does not verify, or a required signature (or signer) is\nmissing.",
    },
    Class {
        name: "PolicyDeniedError",
        bases: &["DeathTensorsError"],
        doc: "An encrypted file's Rego policy (``__policy__``) refused access for\n\
              the ``policy_input`` given; its key was not used.",
    },
    Class {
        name: "NotEncryptedError",
        bases: &["DeathTensorsError"],
        doc: "Encryption was required (``require_encryption=True``) and the file is\nnot encrypted.",
    },
    Class {
        name: "NoChecksumError",
        bases: &["DeathTensorsError"],
        doc: "A check was asked for but the file carries no checksum of that kind.",
    },
    Class {
        name: "LockedError",
        bases: &["DeathTensorsError", "BlockingIOError"],
        doc: "A collection is open for writing elsewhere (another process, thread\n\
              or handle): one writer at a time. The message names the lock file.",
    },
    Class {
        name: "TensorNotFoundError",
        bases: &["DeathTensorsError", "KeyError"],
        doc: "No tensor of that name in the file.",
    },
];

/// The classes once made, in the order of [`CLASSES`]. Like the type
/// objects of pyo3's `create_exception!`, they live as long as the
/// interpreter.
static MADE: GILOnceCell<Vec<Py<PyType>>> = GILOnceCell::new();

fn make(py: Python<'_>) -> PyResult<Vec<Py<PyType>>> {
    let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
    for class in CLASSES {
        let mut bases = Vec::with_capacity(class.bases.len());
        for &base in class.bases {
            let builtin = match base {
                "ValueError" => Some(py.get_type::<PyValueError>()),
                "KeyError" => Some(py.get_type::<PyKeyError>()),
                "BlockingIOError" => Some(py.get_type::<PyBlockingIOError>()),
                _ => None,
            };
            let base = match builtin {
                Some(t) => t,
                None => {
                    let at = CLASSES.iter().position(|c| c.name == base).filter(|&i| i < made.len());
                    let at = at.ok_or_else(|| {
                        PyValueError::new_err(format!("no exception class {base} before {}", class.name))
                    })?;
                    made[at].bind(py).clone()
                }
            };
            bases.push(base);
        }
        let dict = PyDict::new(py);
        dict.set_item("__doc__", class.doc)?;
        dict.set_item("__module__", "deathtensors.errors")?;
        if class.bases.contains(&"KeyError") {
            // KeyError's str() is the repr of its argument: the message is
            // said as it is, as every other error of ours says it.
            dict.set_item("__str__", py.get_type::<PyBaseException>().getattr("__str__")?)?;
        }
        let made_class = py.get_type::<PyType>().call1((class.name, PyTuple::new(py, bases)?, dict))?;
        made.push(made_class.downcast_into::<PyType>()?.unbind());
    }
    Ok(made)
}

/// Adds the exception classes to `_native`.
pub fn add_classes(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let made = MADE.get_or_try_init(py, || make(py))?;
    for (class, t) in CLASSES.iter().zip(made) {
        m.add(class.name, t.bind(py))?;
    }
    Ok(())
}

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let made = MADE.get_or_try_init(py, || make(py))?;
    let at = CLASSES.iter().position(|c| c.name == name);
    at.map(|i| made[i].bind(py).clone()).ok_or_else(|| PyValueError::new_err(format!("no exception class {name}")))
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
