//! OpenSSF model signing of whole directories: `model.sig` bundles that
//! `model_signing sign|verify key|certificate` writes and accepts
//! (`docs/SECURITY.md`, "Model directories").
//!
//! Every file outside the ignored paths is hashed whole (SHA-256, on all
//! cores, two streams per core); the statement lists them, and one ECDSA
//! signature (P-256/SHA-256 or P-384/SHA-384) covers the statement.

mod bundle;
mod cert;
mod commit;
mod keys;
mod walk;

use std::path::{Path, PathBuf};

use self::bundle::{Bundle, Material, Resource, Serialization, Statement};
pub use self::keys::{EcPublicKey, EcSigningKey};
use crate::error::{Error, ErrorKind, Result};

/// Who signs a directory.
#[derive(Debug)]
pub enum ModelSigner {
    /// A private key alone (`model_signing sign key`): the bundle names the
    /// key by a hint, and verifiers need its public key.
    Key(EcSigningKey),
    /// A private key and its certificate chain (`model_signing sign
    /// certificate`): the bundle carries the chain (DER, the signing
    /// certificate first), and verifiers need a root it chains to.
    Certificate {
        /// The key of the signing certificate.
        key: EcSigningKey,
        /// The signing certificate, then the rest of the chain, in DER.
        chain: Vec<Vec<u8>>,
    },
}

impl ModelSigner {
    /// A certificate signer from PEM files: `certificates` concatenated
    /// hold the signing certificate first, then its chain.
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate; a signing
    /// certificate whose public key is not the private key's.
    pub fn certificate(key: EcSigningKey, certificates: &[PathBuf]) -> Result<ModelSigner> {
        let chain = cert::read_pem_certificates(certificates)?;
        let Some(first) = chain.first() else {
            return Err(Error::new(
                ErrorKind::InvalidKey("no certificate given: the signing certificate comes first".into()),
                None,
                "cannot sign the model",
            ));
        };
        let spki = cert::parse(first).map_err(|m| cert::error(&certificates[0], m))?.spki;
        if EcPublicKey::from_spki(&spki).ok().as_ref() != Some(&key.public()) {
            return Err(Error::new(
                ErrorKind::InvalidKey(
                    "the signing certificate (the first one given) is not for this private key".into(),
                ),
                Some(&certificates[0]),
                "cannot sign the model",
            ));
        }
        Ok(ModelSigner::Certificate { key, chain })
    }

    fn key(&self) -> &EcSigningKey {
        match self {
            ModelSigner::Key(k) | ModelSigner::Certificate { key: k, .. } => k,
        }
    }
}

/// Whom a verifier trusts.
#[derive(Debug)]
pub enum ModelVerifier {
    /// Signatures by this key (`model_signing verify key`).
    Key(EcPublicKey),
    /// Signatures by certificates that chain to one of these (DER;
    /// `model_signing verify certificate --certificate_chain`).
    Certificates(Vec<Vec<u8>>),
}

impl ModelVerifier {
    /// A certificate verifier trusting every certificate in these PEM files.
    ///
    /// # Errors
    /// A file that cannot be read or holds no certificate.
    pub fn certificates(paths: &[PathBuf]) -> Result<ModelVerifier> {
        let roots = cert::read_pem_certificates(paths)?;
        if roots.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidKey("no trusted certificate given".into()),
                None,
                "cannot verify the model",
            ));
        }
        Ok(ModelVerifier::Certificates(roots))
    }
}

/// Options of [`sign_model`].
#[derive(Clone, Debug, Default)]
pub struct SignModelOptions {
    /// More paths to leave out, relative to the directory (a directory
    /// leaves out everything below it). `.git`, `.gitattributes`,
    /// `.github`, `.gitignore` and the signature file are always left out.
    pub ignore_paths: Vec<String>,
    /// Hash the files symbolic links point to (off: a link is an error).
    pub allow_symlinks: bool,
}

/// One file a signature covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedFile {
    /// Its path relative to the directory, `/`-separated.
    pub name: String,
    /// The SHA-256 of its bytes.
    pub sha256: [u8; 32],
}

/// What a signature covers: the model's name and its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedModel {
    /// The statement's subject name (the directory's name when signed).
    pub name: String,
    /// The files, in the statement's order.
    pub files: Vec<SignedFile>,
    /// The paths the statement leaves out.
    pub ignore_paths: Vec<String>,
}

impl SignedModel {
    fn from_statement(s: Statement) -> SignedModel {
        SignedModel {
            name: s.model_name,
            files: s.resources.into_iter().map(|r| SignedFile { name: r.name, sha256: r.digest }).collect(),
            ignore_paths: s.serialization.ignore_paths,
        }
    }
}

const SIGN: &str = "cannot sign the model";
const VERIFY: &str = "cannot verify the model";

fn signature_error(path: &Path, message: impl Into<String>) -> Error {
    Error::new(ErrorKind::ModelSignature(message.into()), Some(path), VERIFY)
}

/// The directory's name, as `model_signing` names its subject.
fn model_name(dir: &Path) -> String {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !name.is_empty() && name != ".." {
        return name;
    }
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// Signs every file of `dir` into a model-signing bundle at `signature`
/// (written atomically; `model.sig` inside `dir` is usual).
///
/// # Errors
/// `dir` unreadable, a symbolic link without `allow_symlinks`, a name that
/// is not UTF-8, or the signature file cannot be written.
pub fn sign_model(
    dir: &Path,
    signer: &ModelSigner,
    signature: &Path,
    options: &SignModelOptions,
) -> Result<SignedModel> {
    let mut ignore_paths: Vec<String> = options.ignore_paths.clone();
    if let Some(rel) = walk::relative_inside(dir, signature) {
        ignore_paths.push(rel);
    }
    for g in bundle::GIT_PATHS {
        if !ignore_paths.iter().any(|p| p == g) {
            ignore_paths.push(g.to_string());
        }
    }
    let files = walk::hash_directory(dir, &ignore_paths, options.allow_symlinks, SIGN)?;
    // Each plain tensor file's head and tensors, for lazy verified loads.
    let mut commitments = std::collections::BTreeMap::new();
    for f in &files {
        let path = f.name.split('/').fold(dir.to_path_buf(), |p, c| p.join(c));
        if let Some(c) = commit::commit_file(&path)? {
            commitments.insert(f.name.clone(), c);
        }
    }
    let statement = Statement {
        model_name: model_name(dir),
        serialization: Serialization { allow_symlinks: options.allow_symlinks, ignore_paths },
        resources: files,
        commitments: Some(commitments),
    };
    let payload = statement.to_payload();
    let key = signer.key();
    let sig = key.sign(&bundle::pae(&payload))?;
    let material = match signer {
        ModelSigner::Key(k) => Material::KeyHint(Some(k.public().hint())),
        ModelSigner::Certificate { chain, .. } => Material::Certificates(chain.clone()),
    };
    let bundle = Bundle { material, payload_type: bundle::PAYLOAD_TYPE.into(), payload, signature: sig };
    crate::fs::atomic::write_file(signature, &bundle.to_json(), true)
        .map_err(|e| Error::io(e, signature, "cannot write the signature"))?;
    Ok(SignedModel::from_statement(statement))
}

/// Checks a bundle's signature and statement, without reading the
/// directory: what it says, if its signer is trusted.
///
/// # Errors
/// `ModelSignature` saying why the bundle is refused.
pub fn verify_bundle(verifier: &ModelVerifier, signature: &Path) -> Result<SignedModel> {
    check_bundle(verifier, signature).map(SignedModel::from_statement)
}

/// [`verify_bundle`], keeping the whole statement.
fn check_bundle(verifier: &ModelVerifier, signature: &Path) -> Result<Statement> {
    let bytes = walk::read_bounded(signature, bundle::MAX_BUNDLE, VERIFY)?;
    let bundle = Bundle::from_json(&bytes).map_err(|m| signature_error(signature, m))?;
    let message = bundle::pae(&bundle.payload);
    match (verifier, &bundle.material) {
        (ModelVerifier::Key(key), Material::KeyHint(hint)) => {
            if let Some(hint) = hint {
                if *hint != key.hint() {
                    return Err(signature_error(
                        signature,
                        format!("signed by another key (the bundle's key hint is {hint}, this key's {})", key.hint()),
                    ));
                }
            }
            if !key.verifies(&message, &bundle.signature) {
                return Err(signature_error(
                    signature,
                    "the signature does not verify with this public key (the bundle was modified, or signed by \
                     another key)",
                ));
            }
        }
        (ModelVerifier::Certificates(roots), Material::Certificates(chain)) => {
            cert::verify_chain_signature(roots, chain, &message, &bundle.signature)
                .map_err(|m| signature_error(signature, m))?;
        }
        (ModelVerifier::Key(_), Material::Certificates(_)) => {
            return Err(signature_error(
                signature,
                "the bundle is signed with a certificate; verify it with trusted certificates, not a public key",
            ))
        }
        (ModelVerifier::Certificates(_), Material::KeyHint(_)) => {
            return Err(signature_error(
                signature,
                "the bundle is signed with a bare key; verify it with that public key, not certificates",
            ))
        }
    }
    if bundle.payload_type != bundle::PAYLOAD_TYPE {
        return Err(signature_error(
            signature,
            format!("the envelope's payload type is {:?}, not {}", bundle.payload_type, bundle::PAYLOAD_TYPE),
        ));
    }
    Statement::from_payload(&bundle.payload).map_err(|m| signature_error(signature, m))
}

/// Checks the bundle at `signature` (its signature and statement; no file
/// of `dir` is read) and returns the statement's per-tensor commitments,
/// for readers that check each file's head on open and each tensor as it
/// is read ([`crate::ReadOptions::signed_model`]): a load of one tensor
/// reads and checks the head and that tensor only. Files other than plain
/// tensor files (configs, tokenizers) are checked whole when read through
/// a sharded checkpoint's index; others are not read here at all.
///
/// # Errors
/// `ModelSignature` for a bundle refused, or one without per-tensor
/// commitments (signed by `model_signing` itself or without deathtensors'
/// field): verify those with [`verify_model`].
pub fn open_signed_model(
    dir: &Path,
    verifier: &ModelVerifier,
    signature: &Path,
) -> Result<crate::trust::commitment::ModelCommitments> {
    let statement = check_bundle(verifier, signature)?;
    let Some(files) = statement.commitments else {
        return Err(signature_error(
            signature,
            "the signed statement carries no per-tensor commitments (it was signed by model_signing, or not by \
             deathtensors): verify the whole directory with verify_model instead",
        ));
    };
    let whole = statement.resources.into_iter().map(|r| (r.name, r.digest)).collect();
    crate::trust::commitment::ModelCommitments::new(dir, files, whole)
}

/// Verifies `dir` against the bundle at `signature`: the signature, then
/// every file (none changed, none missing, none added outside the ignored
/// paths).
///
/// # Errors
/// `ModelSignature` for a bundle refused (wrong key, modified, untrusted
/// chain, unsupported); `ModelMismatch` naming the files that differ.
pub fn verify_model(dir: &Path, verifier: &ModelVerifier, signature: &Path) -> Result<SignedModel> {
    let statement = check_bundle(verifier, signature)?;
    let allow_symlinks = statement.serialization.allow_symlinks;
    let model = SignedModel::from_statement(statement);
    let mut ignore_paths = model.ignore_paths.clone();
    if let Some(rel) = walk::relative_inside(dir, signature) {
        ignore_paths.push(rel);
    }
    for g in bundle::GIT_PATHS {
        ignore_paths.push(g.to_string());
    }
    let actual = walk::hash_directory(dir, &ignore_paths, allow_symlinks, VERIFY)?;
    compare(dir, &model, &actual)?;
    Ok(model)
}

/// The differences between what was signed and what is there, as one
/// error naming every file.
fn compare(dir: &Path, model: &SignedModel, actual: &[Resource]) -> Result<()> {
    use std::collections::BTreeMap;
    let expected: BTreeMap<&str, &[u8; 32]> = model.files.iter().map(|f| (f.name.as_str(), &f.sha256)).collect();
    let found: BTreeMap<&str, &[u8; 32]> = actual.iter().map(|r| (r.name.as_str(), &r.digest)).collect();
    let mut problems = Vec::new();
    let extra: Vec<&str> = found.keys().filter(|k| !expected.contains_key(*k)).copied().collect();
    let missing: Vec<&str> = expected.keys().filter(|k| !found.contains_key(*k)).copied().collect();
    let changed: Vec<&str> =
        expected.iter().filter(|(k, d)| found.get(*k).is_some_and(|a| a != *d)).map(|(k, _)| *k).collect();
    if !changed.is_empty() {
        problems.push(format!("changed (SHA-256 differs): {}", changed.join(", ")));
    }
    if !missing.is_empty() {
        problems.push(format!("missing: {}", missing.join(", ")));
    }
    if !extra.is_empty() {
        problems.push(format!("not in the signature: {}", extra.join(", ")));
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::new(ErrorKind::ModelMismatch(problems.join("; ")), Some(dir), VERIFY))
}
