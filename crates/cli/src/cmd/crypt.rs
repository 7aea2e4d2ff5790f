//! `deathtensors keygen`, `encrypt` and `sign`: keys, encrypted copies and
//! signatures (`docs/FORMAT.md` sections 10 and 11). `decrypt` is
//! `convert`'s streaming copy, allowed to write plaintext.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use deathtensors_io::format::{Argon2Params, Cipher, TensorInfo, TensorSpec, DEFAULT_ALIGNMENT};
use deathtensors_io::{EncryptOptions, KeyRing, RecipientKey, SigningKey, SymmetricKey, WriteOptions, X25519SecretKey};

use crate::args::{CipherArg, EncryptArgs, KeyKind, KeygenArgs, SignArgs};
use crate::exit::ExitCode;
use crate::out::{self, Out};

/// Writes a secret key file readable by its owner only.
fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(path).with_context(|| format!("cannot create {} (it must not exist yet)", path.display()))?;
    f.write_all(text.as_bytes()).and_then(|()| f.write_all(b"\n")).with_context(|| format!("cannot write {}", path.display()))
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let kid = args.kid.clone();
    let (secret, public) = match args.kind {
        KeyKind::Symmetric => {
            if args.public_out.is_some() {
                bail!("a symmetric key has no public half: share the key itself with the readers, privately");
            }
            (SymmetricKey::generate(kid.unwrap_or_else(|| "key".into()))?.to_jwk(), None)
        }
        KeyKind::X25519 => {
            let k = X25519SecretKey::generate(kid.unwrap_or_else(|| "key".into()))?;
            (k.to_jwk(true), Some(k.public_key().to_jwk()))
        }
        KeyKind::Ed25519 => {
            let k = SigningKey::generate();
            (k.to_jwk(kid.as_deref(), true), Some(k.verifying_key().to_jwk(kid.as_deref())))
        }
    };
    let mut out = Out::new();
    match &args.out {
        Some(path) => {
            write_secret(path, &serde_json::to_string_pretty(&secret)?)?;
            writeln!(out, "secret key written to {} (keep it private)", path.display())?;
        }
        None => writeln!(out, "{}", serde_json::to_string_pretty(&secret)?)?,
    }
    if let (Some(path), Some(public)) = (&args.public_out, public) {
        std::fs::write(path, serde_json::to_string_pretty(&public)? + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        if args.out.is_some() {
            writeln!(out, "public key written to {}", path.display())?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// The signing keys of JWK files.
fn signers(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<Arc<SigningKey>>> {
    let mut out = Vec::new();
    for f in files {
        let mut ring = KeyRing::new();
        ring.add_jwk_file(f)?;
        let keys = ring.signing_keys();
        if keys.is_empty() {
            bail!("{} holds no Ed25519 signing key (a JWK with \"d\")", f.display());
        }
        out.extend(keys.iter().map(|(_, k)| k.clone()));
    }
    Ok(out)
}

pub fn encrypt(args: EncryptArgs) -> anyhow::Result<ExitCode> {
    let mut recipients = KeyRing::new();
    for f in &args.to {
        recipients.add_jwk_file(f)?;
    }
    if let Some(var) = &args.to_passphrase_env {
        recipients.add_passphrase(Arc::new(crate::keys::passphrase(var)?));
    }
    let recipients: Vec<RecipientKey> = recipients.recipients(Argon2Params::DEFAULT);
    if recipients.is_empty() {
        bail!("no recipient: give --to with a symmetric or X25519 JWK file, or --to-passphrase-env");
    }
    let cipher = match args.cipher {
        CipherArg::Aes256Gcm => Cipher::Aes256Gcm,
        CipherArg::ChaCha20Poly1305 => Cipher::ChaCha20Poly1305,
    };
    let reader = crate::keys::open(&args.input)?;
    let header = reader.header();
    let specs: Vec<TensorSpec> = header.tensors().iter().map(TensorInfo::to_spec).collect();
    let options = WriteOptions {
        alignment: header.alignment().max(DEFAULT_ALIGNMENT),
        checksum: args.checksum,
        metadata: header.metadata().cloned(),
        encryption: Some(EncryptOptions { cipher, chunk_size: args.chunk_size, recipients }),
        signers: signers(&args.sign)?,
        ..WriteOptions::default()
    };
    // A plain, uncompressed input is mapped (copy-on-write, never written):
    // the tensors go from the page cache to the cipher with no copy. Others
    // (compressed, or encrypted for someone else) are read into memory.
    let owned: Vec<Vec<u8>>;
    let map;
    let data: Vec<&[u8]> = if !reader.is_encrypted() && !reader.is_compressed() {
        // SAFETY: the mapping is private and only read; the input must not be
        // truncated while this command runs, as for every reader of a file.
        map = unsafe { reader.map_private() }?;
        let blob = map.as_slice();
        header.tensors().iter().map(|t| &blob[t.data_offsets.0 as usize..t.data_offsets.1 as usize]).collect()
    } else {
        owned = header.tensors().iter().map(|t| reader.read(&t.name)).collect::<Result<_, _>>()?;
        owned.iter().map(Vec::as_slice).collect()
    };
    deathtensors_io::save(&args.output, specs.into_iter().zip(data).collect(), &options)?;
    let mut out = Out::new();
    let n = header.len();
    let bytes: u64 = header.tensors().iter().map(|t| t.byte_len()).sum();
    let signed = if options.signers.is_empty() { "" } else { ", signed" };
    writeln!(
        out,
        "{} -> {}: {}, {}, encrypted ({}) for {}{signed}",
        args.input.display(),
        args.output.display(),
        out::count(n, "tensor"),
        out::size(bytes),
        cipher.name(),
        out::count(options.encryption.as_ref().map_or(0, |e| e.recipients.len()), "recipient"),
    )?;
    out.finish()?;
    Ok(ExitCode::Success)
}

pub fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let keys = signers(std::slice::from_ref(&args.with))?;
    for k in &keys {
        deathtensors_io::sign_file(&args.file, k, true)?;
    }
    let mut out = Out::new();
    let names: Vec<String> = keys.iter().map(|k| k.verifying_key().fingerprint()).collect();
    writeln!(out, "{}: signed by {}", args.file.display(), names.join(", "))?;
    out.finish()?;
    Ok(ExitCode::Success)
}
