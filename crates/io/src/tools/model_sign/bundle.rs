//! The bytes of model signing: the in-toto statement, DSSE's PAE, and the
//! Sigstore bundle that carries them (`docs/SECURITY.md`, "Model
//! directories").

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The bundle's media type; the only one `model_signing` accepts.
pub(crate) const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The DSSE payload type of an in-toto statement.
pub(crate) const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The in-toto statement type.
pub(crate) const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The model-signing predicate, v1.0.
pub(crate) const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// Paths every signature ignores, as `model_signing` does by default.
pub(crate) const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];
/// The largest bundle read: far past any directory's list of files.
pub(crate) const MAX_BUNDLE: u64 = 256 << 20;

/// One file of the statement: its relative POSIX path and SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    pub(crate) name: String,
    pub(crate) digest: [u8; 32],
}

/// The statement's `serialization`, method `files`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Serialization {
    pub(crate) allow_symlinks: bool,
    pub(crate) ignore_paths: Vec<String>,
}

/// What a signature states about a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Statement {
    pub(crate) model_name: String,
    pub(crate) serialization: Serialization,
    /// In the statement's order.
    pub(crate) resources: Vec<Resource>,
    /// deathtensors' per-tensor commitments (`predicate.deathtensors`), by
    /// file name; `None` when the statement carries none we can read.
    pub(crate) commitments: Option<std::collections::BTreeMap<String, crate::trust::commitment::FileCommitment>>,
}

/// The subject digest: SHA-256 of the resources' digests in order.
pub(crate) fn subject_digest(resources: &[Resource]) -> [u8; 32] {
    let mut h = crate::fs::hash::Hasher::new();
    for r in resources {
        h.update(&r.digest);
    }
    h.finish()
}

fn hex(d: &[u8; 32]) -> String {
    deathtensors_format::hex_digest(d)
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Statement {
    /// The payload: the statement's JSON, indented as `model_signing`
    /// writes it (the bytes are signed as they are; layout is free).
    pub(crate) fn to_payload(&self) -> Vec<u8> {
        let resources: Vec<Value> = self
            .resources
            .iter()
            .map(|r| json!({"algorithm": "sha256", "digest": hex(&r.digest), "name": r.name}))
            .collect();
        let mut serialization = Map::new();
        serialization.insert("method".into(), json!("files"));
        serialization.insert("hash_type".into(), json!("sha256"));
        serialization.insert("allow_symlinks".into(), json!(self.serialization.allow_symlinks));
        if !self.serialization.ignore_paths.is_empty() {
            serialization.insert("ignore_paths".into(), json!(self.serialization.ignore_paths));
        }
        let mut predicate = json!({"resources": resources, "serialization": Value::Object(serialization)});
        if let (Some(c), Some(p)) = (&self.commitments, predicate.as_object_mut()) {
            p.insert(super::commit::FIELD.into(), super::commit::to_json(c));
        }
        let statement = json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"name": self.model_name, "digest": {"sha256": hex(&subject_digest(&self.resources))}}],
            "predicateType": PREDICATE_TYPE,
            "predicate": predicate,
        });
        // serde_json's map keeps insertion order only with `preserve_order`;
        // without it keys are sorted, which verifiers do not mind.
        serde_json::to_vec_pretty(&statement).unwrap_or_default()
    }

    /// Parses and checks a signed payload as `model_signing` does: the
    /// statement and predicate types, one subject, sha256 resources whose
    /// digests hash to the subject's.
    pub(crate) fn from_payload(payload: &[u8]) -> Result<Statement, String> {
        let v: Value = serde_json::from_slice(payload).map_err(|e| format!("the signed statement is not JSON: {e}"))?;
        let field = |v: &Value, k: &str| -> Result<Value, String> {
            v.get(k).cloned().ok_or_else(|| format!("the signed statement has no {k:?}"))
        };
        let string = |v: &Value, k: &str| -> Result<String, String> {
            field(v, k)?.as_str().map(str::to_string).ok_or_else(|| format!("the statement's {k:?} is not a string"))
        };
        let kind = string(&v, "_type")?;
        if kind != STATEMENT_TYPE {
            return Err(format!("the payload is a {kind:?}, not an in-toto {STATEMENT_TYPE} statement"));
        }
        let predicate_type = string(&v, "predicateType")?;
        if predicate_type != PREDICATE_TYPE {
            return Err(format!(
                "the predicate is {predicate_type:?}; only {PREDICATE_TYPE} is supported (model_signing 1.x)"
            ));
        }
        let subjects = field(&v, "subject")?;
        let subjects = subjects.as_array().ok_or("the statement's subject is not a list")?;
        let [subject] = subjects.as_slice() else {
            return Err(format!("the statement has {} subjects, not one", subjects.len()));
        };
        let model_name = string(subject, "name")?;
        let expected = subject
            .get("digest")
            .and_then(|d| d.get("sha256"))
            .and_then(Value::as_str)
            .and_then(unhex)
            .ok_or("the statement's subject has no sha256 digest")?;
        let predicate = field(&v, "predicate")?;
        let ser = field(&predicate, "serialization")?;
        let method = string(&ser, "method")?;
        if method != "files" {
            return Err(format!(
                "the serialization method is {method:?}; only \"files\" is supported (sign with model_signing's \
                 default, or with deathtensors)"
            ));
        }
        let hash_type = string(&ser, "hash_type")?;
        if hash_type != "sha256" {
            return Err(format!("the hash type is {hash_type:?}; only \"sha256\" is supported"));
        }
        let allow_symlinks = ser.get("allow_symlinks").and_then(Value::as_bool).unwrap_or(false);
        let mut ignore_paths = Vec::new();
        if let Some(list) = ser.get("ignore_paths") {
            for p in list.as_array().ok_or("the statement's ignore_paths is not a list")? {
                ignore_paths.push(p.as_str().ok_or("an ignore path is not a string")?.to_string());
            }
        }
        let mut resources = Vec::new();
        let list = field(&predicate, "resources")?;
        for r in list.as_array().ok_or("the statement's resources is not a list")? {
            let name = string(r, "name")?;
            let algorithm = string(r, "algorithm")?;
            if algorithm != "sha256" {
                return Err(format!("resource {name:?} is hashed with {algorithm:?}; only sha256 is supported"));
            }
            let digest = unhex(&string(r, "digest")?).ok_or_else(|| format!("resource {name:?} has a bad digest"))?;
            resources.push(Resource { name, digest });
        }
        let actual = subject_digest(&resources);
        if actual != expected {
            return Err(format!(
                "the statement is inconsistent: its subject digest is {}, its resources hash to {}",
                hex(&expected),
                hex(&actual)
            ));
        }
        let commitments = match predicate.get(super::commit::FIELD) {
            Some(c) => super::commit::from_json(c, unhex)?,
            None => None,
        };
        Ok(Statement {
            model_name,
            serialization: Serialization { allow_symlinks, ignore_paths },
            resources,
            commitments,
        })
    }
}

/// DSSE's pre-authentication encoding of an in-toto payload.
pub(crate) fn pae(payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {PAYLOAD_TYPE} {} ", PAYLOAD_TYPE.len(), payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Who signed: a key named by its hint, or a certificate chain (DER,
/// signing certificate first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Material {
    KeyHint(Option<String>),
    Certificates(Vec<Vec<u8>>),
}

/// A bundle as read: the material, and the envelope's parts.
#[derive(Debug)]
pub(crate) struct Bundle {
    pub(crate) material: Material,
    pub(crate) payload_type: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) signature: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleJson {
    media_type: String,
    verification_material: MaterialJson,
    dsse_envelope: EnvelopeJson,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MaterialJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    public_key: Option<PublicKeyJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    x509_certificate_chain: Option<ChainJson>,
    #[serde(default)]
    tlog_entries: Vec<Value>,
}

#[derive(Serialize, Deserialize)]
struct PublicKeyJson {
    #[serde(default)]
    hint: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct ChainJson {
    certificates: Vec<CertJson>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CertJson {
    raw_bytes: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeJson {
    payload: String,
    payload_type: String,
    signatures: Vec<SigJson>,
}

#[derive(Serialize, Deserialize)]
struct SigJson {
    sig: String,
    #[serde(default)]
    keyid: Option<String>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(s: &str, what: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| format!("the bundle's {what} is not base64: {e}"))
}

impl Bundle {
    /// The bundle's JSON, as `model_signing` writes it (one line).
    pub(crate) fn to_json(&self) -> Vec<u8> {
        let mut material = MaterialJson::default();
        match &self.material {
            Material::KeyHint(hint) => material.public_key = Some(PublicKeyJson { hint: hint.clone() }),
            Material::Certificates(certs) => {
                material.x509_certificate_chain =
                    Some(ChainJson { certificates: certs.iter().map(|c| CertJson { raw_bytes: b64(c) }).collect() })
            }
        }
        let json = BundleJson {
            media_type: BUNDLE_MEDIA_TYPE.into(),
            verification_material: material,
            dsse_envelope: EnvelopeJson {
                payload: b64(&self.payload),
                payload_type: self.payload_type.clone(),
                signatures: vec![SigJson { sig: b64(&self.signature), keyid: Some(String::new()) }],
            },
        };
        serde_json::to_vec(&json).unwrap_or_default()
    }

    /// Parses a bundle (no signature checked yet).
    pub(crate) fn from_json(bytes: &[u8]) -> Result<Bundle, String> {
        let json: BundleJson =
            serde_json::from_slice(bytes).map_err(|e| format!("not a Sigstore bundle of model signing: {e}"))?;
        if json.media_type != BUNDLE_MEDIA_TYPE {
            return Err(format!("the bundle's media type is {:?}, not {BUNDLE_MEDIA_TYPE}", json.media_type));
        }
        let m = json.verification_material;
        let material = match (m.public_key, m.x509_certificate_chain) {
            (Some(k), None) => Material::KeyHint(k.hint.filter(|h| !h.is_empty())),
            (None, Some(chain)) => {
                if chain.certificates.is_empty() {
                    return Err("the bundle's certificate chain is empty".into());
                }
                let certs: Result<Vec<_>, _> =
                    chain.certificates.iter().map(|c| unb64(&c.raw_bytes, "certificate")).collect();
                Material::Certificates(certs?)
            }
            (Some(_), Some(_)) => return Err("the bundle names both a public key and a certificate chain".into()),
            (None, None) => {
                return Err("the bundle has neither a public key nor a certificate chain (a Sigstore keyless \
                            bundle? those need the network and are not supported)"
                    .into())
            }
        };
        let env = json.dsse_envelope;
        let first = env.signatures.first().ok_or("the bundle's envelope has no signature")?;
        Ok(Bundle {
            material,
            payload_type: env.payload_type,
            payload: unb64(&env.payload, "payload")?,
            signature: unb64(&first.sig, "signature")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(pae(b"hi"), b"DSSEv1 28 application/vnd.in-toto+json 2 hi".to_vec());
    }

    #[test]
    fn subject_digest_hashes_the_digests_in_order() {
        let a = Resource { name: "a".into(), digest: [1; 32] };
        let b = Resource { name: "b".into(), digest: [2; 32] };
        let mut both = [1u8; 64];
        both[32..].fill(2);
        assert_eq!(subject_digest(&[a.clone(), b.clone()]), crate::fs::hash::sha256(&both));
        assert_ne!(subject_digest(&[b, a]), crate::fs::hash::sha256(&both));
    }

    #[test]
    fn a_statement_round_trips_and_a_changed_digest_is_inconsistent() {
        let s = Statement {
            model_name: "m".into(),
            serialization: Serialization { allow_symlinks: false, ignore_paths: vec![".git".into()] },
            resources: vec![Resource { name: "sub/x.bin".into(), digest: [7; 32] }],
            commitments: None,
        };
        let payload = s.to_payload();
        // With commitments: they round-trip too.
        let committed = crate::trust::commitment::FileCommitment {
            head_len: 88,
            head_sha256: [9; 32],
            tensors: [("w".to_string(), [3; 32])].into_iter().collect(),
        };
        let with =
            Statement { commitments: Some([("sub/x.bin".to_string(), committed)].into_iter().collect()), ..s.clone() };
        assert_eq!(Statement::from_payload(&with.to_payload()).unwrap(), with);
        assert_eq!(Statement::from_payload(&payload).unwrap(), s);
        let text = String::from_utf8(payload).unwrap().replace(&"07".repeat(32), &"08".repeat(32));
        let err = Statement::from_payload(text.as_bytes()).unwrap_err();
        assert!(err.contains("inconsistent"), "{err}");
    }

    #[test]
    fn a_bundle_round_trips_in_the_layout_model_signing_reads() {
        let b = Bundle {
            material: Material::KeyHint(Some("ab".into())),
            payload_type: PAYLOAD_TYPE.into(),
            payload: b"{}".to_vec(),
            signature: vec![1, 2, 3],
        };
        let json = b.to_json();
        let v: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["mediaType"], BUNDLE_MEDIA_TYPE);
        assert_eq!(v["verificationMaterial"]["publicKey"]["hint"], "ab");
        assert_eq!(v["verificationMaterial"]["tlogEntries"], json!([]));
        assert_eq!(v["dsseEnvelope"]["payload"], "e30=");
        assert_eq!(v["dsseEnvelope"]["signatures"][0]["sig"], "AQID");
        let back = Bundle::from_json(&json).unwrap();
        assert_eq!(back.material, b.material);
        assert_eq!(back.signature, b.signature);
        let other = String::from_utf8(json).unwrap().replace("v0.3", "v0.2");
        assert!(Bundle::from_json(other.as_bytes()).unwrap_err().contains("media type"));
    }
}
