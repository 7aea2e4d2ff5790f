//! `deathtensors keygen`, `encrypt` and `sign`: keys, encrypted copies and
//! signatures (`docs/FORMAT.md` sections 10 and 11). `decrypt` is
//! `convert`'s streaming copy, allowed to write plaintext.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use deathtensors_io::format::{Argon2Params, Cipher, TensorInfo, TensorSpec, DEFAULT_ALIGNMENT};
use deathtensors_io::{EncryptOptions, KeyRing, RecipientKey, SigningKey, SymmetricKey, WriteOptions, X25519SecretKey};

use crate::args::{CipherArg, EncryptArgs, EncryptFormat, KeyFormat, KeyKind, KeygenArgs, SignArgs};
use crate::context::RunContext;
use crate::exit::ExitCode;
use crate::out::{self, Out};

/// Writes a new key file, never replacing one: the text goes to a temp file
/// beside `path` (readable by its owner only when `secret`), synced, then
/// hard-linked to `path`, which fails if anything is there (a file or a
/// symlink), so `path` never holds a partial key; the temp file is removed
/// (a process killed in between leaves `.NAME.PID.keygen-tmp`, as private
/// as the key). On filesystems without hard links it is created in place,
/// exclusively.
fn write_new(path: &Path, text: &str, secret: bool) -> anyhow::Result<()> {
    let exclusive = |p: &Path| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        // Off unix a new file gets its folder's ACL: `secret` has no mode to set.
        #[cfg(not(unix))]
        let _ = secret;
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, if secret { 0o600 } else { 0o644 });
        options.open(p)
    };
    let fill = |f: &mut std::fs::File| f.write_all(format!("{text}\n").as_bytes()).and_then(|()| f.sync_all());
    let exists = || anyhow::anyhow!("{} exists already (a key file is never overwritten)", path.display());
    if path.symlink_metadata().is_ok() {
        return Err(exists());
    }
    let name = path.file_name().with_context(|| format!("{} is not a file name", path.display()))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.keygen-tmp", std::process::id()));
    let temp = path.with_file_name(temp_name);
    let mut f = exclusive(&temp).with_context(|| format!("cannot create {}", path.display()))?;
    let written = fill(&mut f);
    drop(f);
    let linked = written.and_then(|()| std::fs::hard_link(&temp, path));
    let _ = std::fs::remove_file(&temp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(exists()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::Unsupported | std::io::ErrorKind::PermissionDenied) => {
            // No hard links here (FAT, some network filesystems).
            let mut f = exclusive(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => exists(),
                _ => anyhow::Error::new(e).context(format!("cannot create {}", path.display())),
            })?;
            fill(&mut f).map_err(|e| {
                let _ = std::fs::remove_file(path);
                anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
            })
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("cannot write {}", path.display()))),
    }
}

/// Whether two paths of files not yet written name the same place: their
/// directories resolved, or else the paths made absolute.
fn same_place(a: &Path, b: &Path) -> bool {
    let place = |p: &Path| -> Option<std::path::PathBuf> {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        match std::fs::canonicalize(dir) {
            Ok(dir) => Some(dir.join(p.file_name()?)),
            Err(_) => std::path::absolute(p).ok().map(|p| p.components().collect()),
        }
    };
    matches!((place(a), place(b)), (Some(a), Some(b)) if a == b)
}

pub fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    let mut kid = args.kid.clone();
    if args.format == KeyFormat::Cryptotensors && kid.is_none() {
        kid = Some("key".into()); // cryptotensors' registry needs a key id
    }
    if let (Some(out), Some(public)) = (&args.out, &args.public_out) {
        if same_place(out, public) {
            bail!("--out and --public-out both name {}: the public half would replace the secret key", out.display());
        }
    }
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
    let (secret, public) = match args.format {
        KeyFormat::Jwk => (secret, public),
        KeyFormat::Cryptotensors => {
            if args.kind == KeyKind::X25519 {
                bail!("cryptotensors has no X25519 keys: make a symmetric key (and an Ed25519 one to sign)");
            }
            let ct = |v: &serde_json::Value| deathtensors_io::cryptotensors_jwk(v).map_err(anyhow::Error::msg);
            (ct(&secret)?, public.as_ref().map(ct).transpose()?)
        }
    };
    // Of the public half (Ed25519, X25519): the key as inspect and verify name it.
    let fingerprint = deathtensors_io::describe_keys(&secret, None)?.first().and_then(|k| k.fingerprint.clone());
    let public = match (&args.public_out, public) {
        (Some(path), Some(public)) => Some((path, serde_json::to_string_pretty(&public)?)),
        _ => None,
    };
    let mut out = Out::new();
    match &args.out {
        Some(path) => {
            write_new(path, &serde_json::to_string_pretty(&secret)?, true)?;
            if let Some((public_path, text)) = &public {
                if let Err(e) = write_new(public_path, text, false) {
                    // Both halves or neither, so that a retry starts clean.
                    let _ = std::fs::remove_file(path);
                    return Err(e.context(format!("{} was not kept", path.display())));
                }
            }
            writeln!(out, "secret key written to {} (keep it private)", path.display())?;
            if let Some((public_path, _)) = &public {
                writeln!(out, "public key written to {}", public_path.display())?;
            }
            if let Some(fingerprint) = &fingerprint {
                writeln!(out, "fingerprint {fingerprint} (how inspect, verify and errors name this key)")?;
            }
        }
        None => {
            if let Some((public_path, text)) = &public {
                write_new(public_path, text, false)?;
            }
            writeln!(out, "{}", serde_json::to_string_pretty(&secret)?)?;
            // stdout is the key alone (to pipe to a file): the fingerprint goes to stderr.
            if let Some(fingerprint) = &fingerprint {
                out::note(&format!("fingerprint {fingerprint}"));
            }
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// io's refusal of a ring without a signing key, said of the file `f`.
fn no_signer(f: &std::path::Path, e: deathtensors_io::Error) -> anyhow::Error {
    match e.kind() {
        deathtensors_io::ErrorKind::InvalidKey(why) => anyhow::anyhow!("{} {why}", f.display()),
        _ => e.into(),
    }
}

/// The signing keys of JWK files (io's rule: each holds one).
fn signers(files: &[std::path::PathBuf]) -> anyhow::Result<Vec<Arc<SigningKey>>> {
    let mut out = Vec::new();
    for f in files {
        let mut ring = KeyRing::new();
        ring.add_jwk_file(f)?;
        out.extend(ring.signers().map_err(|e| no_signer(f, e))?);
    }
    Ok(out)
}

pub fn encrypt(args: EncryptArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    if args.format == EncryptFormat::Cryptotensors {
        return encrypt_cryptotensors(&args, ctx);
    }
    let mut recipients = KeyRing::new();
    for f in &args.recipients {
        recipients.add_jwk_file(f)?;
    }
    if let Some(var) = &args.recipient_passphrase_env {
        recipients.add_passphrase(Arc::new(crate::keys::passphrase(var)?));
    }
    let recipients: Vec<RecipientKey> = recipients.encrypt_to(Argon2Params::DEFAULT).map_err(|e| match e.kind() {
        deathtensors_io::ErrorKind::InvalidInput(_) => {
            anyhow::anyhow!(
                "no recipient: give --recipient with a symmetric or X25519 JWK file, or --recipient-passphrase-env"
            )
        }
        _ => e.into(),
    })?;
    let cipher = match args.cipher.unwrap_or(CipherArg::Aes256Gcm) {
        CipherArg::Aes256Gcm => Cipher::Aes256Gcm,
        CipherArg::ChaCha20Poly1305 => Cipher::ChaCha20Poly1305,
    };
    let reader = ctx.open(&args.input)?;
    let header = reader.header();
    let specs: Vec<TensorSpec> = header.tensors().iter().map(TensorInfo::to_spec).collect();
    let options = WriteOptions {
        alignment: header.alignment().max(DEFAULT_ALIGNMENT),
        checksum: args.checksum,
        metadata: reader.model_metadata(),
        encryption: Some(EncryptOptions {
            cipher,
            chunk_size: args.chunk_size.unwrap_or(deathtensors_io::format::DEFAULT_CHUNK_SIZE),
            recipients,
            seal_header: args.seal_header,
        }),
        signers: signers(&args.sign)?,
        ..WriteOptions::default()
    };
    let total = header.tensors().iter().map(|t| t.byte_len()).sum();
    with_data(&reader, |data| {
        let bar = crate::progress::bar(total, "encrypting");
        let tensors = specs.into_iter().zip(data).collect();
        let saved = deathtensors_io::save_with_progress(&args.output, tensors, &options, &|n| bar.inc(n));
        bar.finish_and_clear();
        saved
    })?;
    let mut out = Out::new();
    let n = header.len();
    let bytes: u64 = header.tensors().iter().map(|t| t.byte_len()).sum();
    let signed = if options.signers.is_empty() { "" } else { ", signed" };
    let sealed = if args.seal_header { ", header sealed" } else { "" };
    writeln!(
        out,
        "{} -> {}: {}, {}, encrypted ({}) for {}{sealed}{signed}",
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

/// Runs `f` on every tensor's plaintext, in header order. A plain,
/// uncompressed input is mapped (copy-on-write, never written): the tensors
/// go from the page cache to the cipher with no copy. Others (compressed,
/// or encrypted for the holder of --key) are read into memory.
fn with_data<T>(
    reader: &deathtensors_io::Reader,
    f: impl FnOnce(Vec<&[u8]>) -> deathtensors_io::Result<T>,
) -> anyhow::Result<T> {
    let header = reader.header();
    // Nothing damaged is sealed under a new tag or signature.
    let names: Vec<&str> = header.tensors().iter().map(|t| t.name.as_str()).collect();
    crate::integrity::check(reader, &names)?;
    // A signed input is read (its digests checked on the way), not mapped.
    if !reader.is_encrypted() && !reader.is_compressed() && !reader.checked_reads() {
        // SAFETY: the mapping is private and only read; the input must not be
        // truncated while this command runs, as for every reader of a file.
        let map = unsafe { reader.map_private() }?;
        let blob = map.as_slice();
        let data =
            header.tensors().iter().map(|t| &blob[t.data_offsets.0 as usize..t.data_offsets.1 as usize]).collect();
        return Ok(f(data)?);
    }
    let owned: Vec<Vec<u8>> = header.tensors().iter().map(|t| reader.read(&t.name)).collect::<Result<_, _>>()?;
    Ok(f(owned.iter().map(Vec::as_slice).collect())?)
}

/// `encrypt --format cryptotensors`.
fn encrypt_cryptotensors(args: &EncryptArgs, ctx: &RunContext) -> anyhow::Result<ExitCode> {
    use deathtensors_io::format::CtAlg;
    let mut ring = KeyRing::new();
    for f in &args.recipients {
        ring.add_jwk_file(f)?;
    }
    let masters = ring.symmetric_keys_list();
    let [master] = &masters[..] else {
        bail!("cryptotensors files have one master key: give exactly one --recipient with a symmetric JWK file");
    };
    if args.recipient_passphrase_env.is_some() {
        bail!("cryptotensors files have no passphrase recipients");
    }
    if args.seal_header {
        bail!("cryptotensors files cannot seal their header");
    }
    let [sign_file] = &args.sign[..] else {
        bail!("cryptotensors signs every encrypted file: give exactly one --sign with an Ed25519 JWK file");
    };
    let mut signing = KeyRing::new();
    signing.add_jwk_file(sign_file)?;
    signing.signers().map_err(|e| no_signer(sign_file, e))?;
    let Some((sign_kid, signer)) = signing.signing_keys().first().cloned() else {
        unreachable!("signers() refused a ring without a signing key");
    };
    let asked = args.cipher.map(|c| match c {
        CipherArg::Aes256Gcm => CtAlg::Aes256Gcm,
        CipherArg::ChaCha20Poly1305 => CtAlg::ChaCha20Poly1305,
    });
    let alg = match (master.alg(), asked) {
        (Some(name), asked) => {
            let Some(alg) = CtAlg::parse(name) else {
                bail!("the master key's alg {name:?} is not a cipher cryptotensors has (aes128gcm, aes256gcm, chacha20poly1305)");
            };
            // cryptotensors encrypts with the key's alg whatever the header
            // says: a --cipher that differs would be silently ignored.
            if let Some(asked) = asked.filter(|a| *a != alg) {
                bail!(
                    "--cipher {} but the master key's alg is {name:?} ({}), which cryptotensors uses: drop \
                     --cipher, or use a key made for {}",
                    asked.name(),
                    alg.name(),
                    asked.name()
                );
            }
            alg
        }
        (None, asked) => asked.unwrap_or(CtAlg::Aes256Gcm),
    };
    let options = deathtensors_io::CryptotensorsOptions {
        master: master.clone(),
        alg,
        signer,
        sign_kid,
        version: args.ct_version,
        chunk_size: args.chunk_size.unwrap_or(deathtensors_io::format::CT_DEFAULT_CHUNK_SIZE),
        policy: None,
        tensors: None,
        durable: true,
    };
    let reader = ctx.open(&args.input)?;
    let header = reader.header();
    let specs: Vec<TensorSpec> = header.tensors().iter().map(TensorInfo::to_spec).collect();
    let metadata = reader.model_metadata();
    with_data(&reader, |data| {
        deathtensors_io::save_cryptotensors(&args.output, specs.into_iter().zip(data).collect(), metadata, &options)
    })?;
    let mut out = Out::new();
    writeln!(
        out,
        "{} -> {}: cryptotensors v{} ({}), {}, for key {:?}, signed",
        args.input.display(),
        args.output.display(),
        args.ct_version,
        alg.name(),
        out::count(header.len(), "tensor"),
        master.kid()
    )?;
    out.finish()?;
    Ok(ExitCode::Success)
}

pub fn sign(args: SignArgs) -> anyhow::Result<ExitCode> {
    let keys = signers(std::slice::from_ref(&args.with))?;
    for k in &keys {
        // The check before signing reads the file: the bar is over it.
        let progress = std::sync::OnceLock::<indicatif::ProgressBar>::new();
        deathtensors_io::sign_file_with(
            &args.file,
            k,
            true,
            |total| {
                let _ = progress.set(crate::progress::bar(total, "checking before signing"));
            },
            |n| {
                if let Some(b) = progress.get() {
                    b.inc(n);
                }
            },
        )?;
        if let Some(b) = progress.get() {
            b.finish_and_clear();
        }
    }
    let mut out = Out::new();
    let names: Vec<String> = keys.iter().map(|k| k.verifying_key().fingerprint()).collect();
    writeln!(out, "{}: signed by {}", args.file.display(), names.join(", "))?;
    out.finish()?;
    Ok(ExitCode::Success)
}
