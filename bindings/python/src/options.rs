//! `deathtensors._native.ReadOptions` and `WriteOptions`: the options of an
//! open and of a save, built once from Python's keywords and handed whole
//! to every constructor and writer (`Reader`, `ShardedIndex`, `save`,
//! `save_sharded`, `convert`, ...).
//!
//! Values are translated here (Python objects to io's types); the rules
//! they must meet are io's. Python passes its keywords through unchanged.

use deathtensors_io::format::{Argon2Params, Cipher, Format, Metadata};
use deathtensors_io::{Compress, EncryptOptions, ErrorKind, VerifyingKey};
use deathtensors_remote::RemoteOptions;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};

use crate::errors::error;
use crate::keys::PyKeyRing;

/// What an open is given: io's read options, and the store's options for
/// a URL. Shared by every shard of a sharded checkpoint.
#[derive(Debug)]
#[pyclass(name = "ReadOptions", module = "deathtensors._native", frozen)]
pub struct PyReadOptions {
    pub(crate) read: deathtensors_io::ReadOptions,
    pub(crate) remote: RemoteOptions,
}

impl PyReadOptions {
    /// io's defaults, and the store's from the environment: an open given
    /// no options.
    pub(crate) fn defaults() -> PyReadOptions {
        PyReadOptions { read: deathtensors_io::ReadOptions::default(), remote: RemoteOptions::from_env() }
    }

    /// The read and store options an open takes (each open owns its copy),
    /// from Python's `options` argument (None: the defaults).
    pub(crate) fn of(options: Option<Bound<'_, PyReadOptions>>) -> (deathtensors_io::ReadOptions, RemoteOptions) {
        match options {
            Some(o) => (o.get().read.clone(), o.get().remote.clone()),
            None => {
                let PyReadOptions { read, remote } = PyReadOptions::defaults();
                (read, remote)
            }
        }
    }
}

#[pymethods]
impl PyReadOptions {
    /// `keys` decrypt; `trusted_signers` (32-byte Ed25519 public keys),
    /// `require_signature` and `require_encryption` refuse files that do
    /// not meet them; `policy_input` (any JSON value: dicts, lists, str,
    /// numbers, bools, None) is the input of a file's Rego policy;
    /// `max_decompressed_len`, `max_kdf_work` and `max_header_len` cap
    /// untrusted work (None: io's defaults); `storage_options` (a dict) configure the store of a
    /// URL; `signed_model` (from `open_signed_model`) holds the file to a
    /// verified model signature's commitments; `map_tensors` (None: by
    /// the file system) maps large tensors or reads them (io's
    /// `ReadOptions::map_tensors`).
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, keys = None, trusted_signers = Vec::new(), require_signature = false, require_encryption = false, policy_input = None, max_decompressed_len = None, max_kdf_work = None, storage_options = None, max_header_len = None, signed_model = None, map_tensors = None))]
    fn new(
        py: Python<'_>,
        keys: Option<PyKeyRing>,
        trusted_signers: Vec<[u8; 32]>,
        require_signature: bool,
        require_encryption: bool,
        policy_input: Option<Bound<'_, PyAny>>,
        max_decompressed_len: Option<u64>,
        max_kdf_work: Option<u64>,
        storage_options: Option<Bound<'_, PyAny>>,
        max_header_len: Option<u64>,
        signed_model: Option<PyRef<'_, crate::model_sign::PySignedModel>>,
        map_tensors: Option<bool>,
    ) -> PyResult<PyReadOptions> {
        let policy_input = policy_input
            .map(|value| json_value(&value))
            .transpose()
            .map_err(|e| error(py, format!("policy_input is not JSON: {e}")))?;
        let defaults = deathtensors_io::ReadOptions::default();
        let read = deathtensors_io::ReadOptions {
            policy_input,
            keys: keys.map(|k| k.inner).unwrap_or_default(),
            trusted_signers: trusted_signers.into_iter().map(VerifyingKey).collect(),
            require_signature,
            require_encryption,
            max_decompressed_len: max_decompressed_len.unwrap_or(defaults.max_decompressed_len),
            max_kdf_work: max_kdf_work.unwrap_or(defaults.max_kdf_work),
            signed_model: signed_model.map(|m| m.inner.clone()),
            map_tensors,
            ..defaults
        };
        let read = match max_header_len {
            Some(len) => read.with_max_header_len(len).map_err(pyo3::exceptions::PyValueError::new_err)?,
            None => read,
        };
        Ok(PyReadOptions { read, remote: remote_options(Some(storage_pairs(storage_options)?)) })
    }
}

/// Python's `storage_options` (object_store's keys, as fsspec users pass
/// them: `{"aws_region": ..., "allow_http": True}`) as string pairs.
pub(crate) fn storage_pairs(storage_options: Option<Bound<'_, PyAny>>) -> PyResult<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    if let Some(options) = storage_options {
        let options = options.downcast::<PyMapping>().map_err(|_| {
            let kind = options.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!("storage_options must be a dict, got {kind}"))
        })?;
        for item in options.items()?.iter() {
            let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            // object_store spells booleans in lower case.
            let value = match value.downcast::<PyBool>() {
                Ok(b) => b.is_true().to_string(),
                Err(_) => value.str()?.to_string(),
            };
            pairs.push((key.str()?.to_string(), value));
        }
    }
    Ok(pairs)
}

/// Remote options from storage option pairs (the uploads' `storage_options`).
pub(crate) fn remote_options(storage_options: Option<Vec<(String, String)>>) -> RemoteOptions {
    RemoteOptions {
        storage_options: storage_options.unwrap_or_default(),
        // A cache when DEATHTENSORS_REMOTE_CACHE names a directory.
        ..RemoteOptions::from_env()
    }
}

/// A Python value as JSON, as `json.dumps` sees it: dicts (keys str, int,
/// float, bool or None, written as strings), lists and tuples, str, int,
/// float, bool and None. NaN and infinities are not JSON.
fn json_value(value: &Bound<'_, PyAny>) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.downcast::<PyInt>().is_ok() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(format!("integer {} is out of JSON's range here", value.str().map_err(|e| e.to_string())?));
    }
    if let Ok(f) = value.downcast::<PyFloat>() {
        let f = f.value();
        return serde_json::Number::from_f64(f).map(Value::Number).ok_or_else(|| format!("{f} is not a JSON number"));
    }
    if let Ok(s) = value.downcast::<PyString>() {
        return Ok(Value::String(s.to_str().map_err(|e| e.to_string())?.to_string()));
    }
    if let Ok(d) = value.downcast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let key = match json_value(&k)? {
                Value::String(s) => s,
                Value::Null if k.is_none() => "null".into(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                _ => return Err(format!("keys must be str, int, float, bool or None, not {}", type_name(&k))),
            };
            map.insert(key, json_value(&v)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(l) = value.downcast::<PyList>() {
        return l.iter().map(|v| json_value(&v)).collect::<Result<_, _>>().map(Value::Array);
    }
    if let Ok(t) = value.downcast::<PyTuple>() {
        return t.iter().map(|v| json_value(&v)).collect::<Result<_, _>>().map(Value::Array);
    }
    Err(format!("object of type {} is not JSON serializable", type_name(value)))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value.get_type().name().map(|n| n.to_string()).unwrap_or_default()
}

/// `compress=`: False or None (off), True (each tensor in chunks, flag bit
/// 5) or `"blob"` (deathtensors 0.3.0's whole-blob frame).
#[derive(Clone, Copy, Debug)]
enum CompressMode {
    Off,
    Chunks,
    Blob,
}

impl<'py> FromPyObject<'py> for CompressMode {
    fn extract_bound(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        if value.is_none() {
            return Ok(CompressMode::Off);
        }
        if let Ok(b) = value.downcast::<PyBool>() {
            return Ok(if b.is_true() { CompressMode::Chunks } else { CompressMode::Off });
        }
        if value.downcast::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|s| s == "blob")) {
            return Ok(CompressMode::Blob);
        }
        Err(error(value.py(), format!("compress must be False, True or 'blob', got {}", value.repr()?)))
    }
}

/// `checksum=`: False or None (none), True (a SHA-256 digest of every
/// tensor and the footer over the file) or `"tensors"` (the digests alone:
/// one hashing pass, for files read tensor by tensor).
#[derive(Clone, Copy, Debug)]
struct ChecksumMode {
    checksum: bool,
    footer: bool,
}

impl<'py> FromPyObject<'py> for ChecksumMode {
    fn extract_bound(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        if value.is_none() {
            return Ok(ChecksumMode { checksum: false, footer: true });
        }
        if let Ok(b) = value.downcast::<PyBool>() {
            return Ok(ChecksumMode { checksum: b.is_true(), footer: true });
        }
        if value.downcast::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|s| s == "tensors")) {
            return Ok(ChecksumMode { checksum: true, footer: false });
        }
        Err(error(value.py(), format!("checksum must be False, True or 'tensors', got {}", value.repr()?)))
    }
}

/// `compress_level=`: a Python int (not a bool) that io's rule accepts
/// (`Compress::is_valid_level`), checked when the options are built so that
/// a bad level fails before anything is written.
#[derive(Clone, Copy, Debug)]
struct Level(i32);

impl<'py> FromPyObject<'py> for Level {
    fn extract_bound(value: &Bound<'py, PyAny>) -> PyResult<Self> {
        let level = value.downcast::<PyBool>().is_err().then(|| value.downcast::<PyInt>().ok()?.extract::<i32>().ok());
        match level.flatten() {
            Some(level) if Compress::is_valid_level(level) => Ok(Level(level)),
            _ => {
                Err(error(value.py(), format!("compress_level must be an integer from 1 to 22, got {}", value.repr()?)))
            }
        }
    }
}

/// What a save is given: io's write options, keys included.
#[pyclass(name = "WriteOptions", module = "deathtensors._native", frozen)]
pub struct PyWriteOptions {
    pub(crate) inner: deathtensors_io::WriteOptions,
}

impl std::fmt::Debug for PyWriteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.inner, f)
    }
}

#[pymethods]
impl PyWriteOptions {
    /// `format` is "deathtensors", "safetensors" or "bintensors";
    /// `checksum` False, True or "tensors" (digests without the footer);
    /// `compress` False, True or "blob" at `compress_level` (1 to 22);
    /// `encrypt` (a key ring of recipients) with `cipher`, `chunk_size` and
    /// `seal_header`; `sign` (a key ring of Ed25519 signing keys);
    /// `drop_cache` (with `durable`) keeps the file out of the page cache.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, global_metadata = None, checksum = ChecksumMode { checksum: false, footer: true }, durable = true, drop_cache = false, format = "deathtensors", alignment = 64, encrypt = None, sign = None, cipher = "AES-256-GCM", chunk_size = 1 << 20, seal_header = false, compress_level = Level(Compress::DEFAULT_LEVEL), compress = CompressMode::Off))]
    fn new(
        py: Python<'_>,
        global_metadata: Option<Metadata>,
        checksum: ChecksumMode,
        durable: bool,
        drop_cache: bool,
        format: &str,
        alignment: u64,
        encrypt: Option<PyKeyRing>,
        sign: Option<PyKeyRing>,
        cipher: &str,
        chunk_size: u64,
        seal_header: bool,
        compress_level: Level,
        compress: CompressMode,
    ) -> PyResult<PyWriteOptions> {
        // The level is checked (first) whatever the mode, as deathtensors
        // 0.3.0 did.
        let Level(level) = compress_level;
        let compress = match compress {
            CompressMode::Off => Compress::Off,
            CompressMode::Chunks => Compress::Chunked { level },
            CompressMode::Blob => Compress::Blob { level },
        };
        let mut inner = deathtensors_io::WriteOptions {
            format: parse_format(format)?,
            checksum: checksum.checksum,
            footer: checksum.footer,
            durable,
            drop_cache,
            metadata: global_metadata,
            alignment,
            compress,
            ..deathtensors_io::WriteOptions::default()
        };
        apply_keys(py, &mut inner, encrypt, sign, cipher, chunk_size, seal_header)?;
        // io's rules (drop_cache needs durable, ...), before anything is
        // written: a bad argument, so ValueError.
        if let Some(why) = inner.broken_rule() {
            let why = why.replacen("drop_cache needs durable", "drop_cache=True needs durable=True", 1);
            return Err(pyo3::exceptions::PyValueError::new_err(why));
        }
        Ok(PyWriteOptions { inner })
    }

    /// Whether the save fsyncs before the file replaces its target.
    #[getter]
    fn durable(&self) -> bool {
        self.inner.durable
    }
}

/// Parses the `format` argument.
fn parse_format(format: &str) -> PyResult<Format> {
    match format {
        "deathtensors" => Ok(Format::Deathtensors),
        "safetensors" => Ok(Format::Safetensors),
        "bintensors" => Ok(Format::Bintensors),
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown format {other:?}: use 'deathtensors', 'safetensors' or 'bintensors'"
        ))),
    }
}

/// Sets the encryption and signing options of a save from key rings.
fn apply_keys(
    py: Python<'_>,
    options: &mut deathtensors_io::WriteOptions,
    encrypt: Option<PyKeyRing>,
    sign: Option<PyKeyRing>,
    cipher: &str,
    chunk_size: u64,
    seal_header: bool,
) -> PyResult<()> {
    let parsed = Cipher::from_name(cipher);
    let recipients = match encrypt {
        Some(ring) => Some(ring.inner.encrypt_to(Argon2Params::DEFAULT).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::InvalidKey(m) | ErrorKind::InvalidInput(m) => m.clone(),
                _ => e.to_string(),
            };
            error(py, format!("encrypt=: {why}"))
        })?),
        None => None,
    };
    let cipher = match (&recipients, parsed) {
        (Some(_), None) => {
            return Err(error(py, format!("unknown cipher {cipher:?}: use 'AES-256-GCM' or 'CHACHA20-POLY1305'")))
        }
        (_, parsed) => parsed.unwrap_or(Cipher::Aes256Gcm),
    };
    options.encryption =
        EncryptOptions::requested(recipients, cipher, chunk_size, seal_header).map_err(|m| error(py, m))?;
    if let Some(ring) = sign {
        options.signers = ring.inner.signers().map_err(|e| match e.kind() {
            ErrorKind::InvalidKey(why) => error(py, format!("sign= {why}")),
            _ => crate::errors::to_py(py, e),
        })?;
    }
    Ok(())
}
