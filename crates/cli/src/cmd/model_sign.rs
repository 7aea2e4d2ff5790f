//! `deathtensors sign-model` and `verify-model`: OpenSSF model-signing
//! bundles of whole directories (`deathtensors_io::sign_model`).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use deathtensors_io::{EcPublicKey, EcSigningKey, ModelSigner, ModelVerifier, SignModelOptions, SignedModel};

use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::verdict::{report_json, Kind, Report};

/// Options of `sign-model`.
#[derive(Debug, Args)]
pub struct SignModelArgs {
    /// The model directory.
    pub dir: PathBuf,
    /// The ECDSA private key, PEM (P-256 or P-384; PKCS#8 or SEC1).
    #[arg(long, value_name = "KEY.pem")]
    pub private_key: PathBuf,
    /// Certificate mode: the signing certificate of the key (PEM).
    #[arg(long, value_name = "CERT.pem")]
    pub signing_cert: Option<PathBuf>,
    /// Certificate mode: the rest of the chain, up to the root (PEM; repeatable, in order).
    #[arg(long, value_name = "CERT.pem", requires = "signing_cert")]
    pub cert_chain: Vec<PathBuf>,
    /// Where to write the bundle [default: DIR/model.sig].
    #[arg(short = 's', long = "signature", value_name = "FILE")]
    pub signature: Option<PathBuf>,
    /// A path relative to DIR to leave out (repeatable; a directory leaves out all below it).
    #[arg(long = "ignore", value_name = "PATH")]
    pub ignore: Vec<String>,
    /// Hash the files symbolic links point to (else a link is an error).
    #[arg(long)]
    pub allow_symlinks: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `verify-model`.
#[derive(Debug, Args)]
pub struct VerifyModelArgs {
    /// The model directory.
    pub dir: PathBuf,
    /// Key mode: the signer's ECDSA public key, PEM (P-256 or P-384).
    #[arg(long, value_name = "KEY.pem", required_unless_present = "cert_chain", conflicts_with = "cert_chain")]
    pub public_key: Option<PathBuf>,
    /// Certificate mode: trusted certificates, PEM (repeatable).
    #[arg(long, value_name = "CERT.pem")]
    pub cert_chain: Vec<PathBuf>,
    /// The bundle [default: DIR/model.sig].
    #[arg(short = 's', long = "signature", value_name = "FILE")]
    pub signature: Option<PathBuf>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

fn default_signature(dir: &Path, given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| dir.join("model.sig"))
}

fn report(model: &SignedModel, dir: &Path, signature: &Path, verb: &str, json: bool) -> anyhow::Result<()> {
    let mut out = Out::new();
    if json {
        let files: Vec<serde_json::Value> = model
            .files
            .iter()
            .map(|f| serde_json::json!({"name": f.name, "sha256": deathtensors_io::format::hex_digest(&f.sha256)}))
            .collect();
        let doc = serde_json::json!({
            "ok": true, "model": model.name, "signature": signature.display().to_string(), "files": files,
        });
        if verb == "verified" {
            // `verify`'s one shape: what was checked under `checked`.
            let mut report = Report::ok(dir, Kind::Model, doc);
            if let Some(checked) = report.checked.as_object_mut() {
                checked.remove("ok");
            }
            out.json(&report.to_json())?;
        } else {
            out.json(&doc)?;
        }
    } else {
        writeln!(out, "{verb} {} ({}): {}", model.name, out::count(model.files.len(), "file"), signature.display())?;
    }
    out.finish()?;
    Ok(())
}

pub fn sign(args: SignModelArgs) -> anyhow::Result<ExitCode> {
    let key = EcSigningKey::from_pem_file(&args.private_key)?;
    let signer = match args.signing_cert {
        None => ModelSigner::Key(key),
        Some(first) => ModelSigner::certificate(key, &[vec![first], args.cert_chain].concat())?,
    };
    let signature = default_signature(&args.dir, args.signature);
    let options = SignModelOptions { ignore_paths: args.ignore, allow_symlinks: args.allow_symlinks };
    let model = deathtensors_io::sign_model(&args.dir, &signer, &signature, &options)?;
    report(&model, &args.dir, &signature, "signed", args.json)?;
    Ok(ExitCode::Success)
}

pub fn verify(args: VerifyModelArgs) -> anyhow::Result<ExitCode> {
    let verifier = match &args.public_key {
        Some(key) => ModelVerifier::Key(EcPublicKey::from_pem_file(key)?),
        None => ModelVerifier::certificates(&args.cert_chain)?,
    };
    let signature = default_signature(&args.dir, args.signature);
    let model = deathtensors_io::verify_model(&args.dir, &verifier, &signature)
        .map_err(|e| report_json(&args.dir, Kind::Model, args.json, e.into()))?;
    report(&model, &args.dir, &signature, "verified", args.json)?;
    Ok(ExitCode::Success)
}
