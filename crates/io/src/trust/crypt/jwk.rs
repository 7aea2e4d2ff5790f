//! JSON Web Keys (RFC 7517, 8037): how keys travel in files, environment
//! variables and Python dicts, as cryptotensors and other tools write them.
//! Symmetric keys are `{"kty": "oct", "kid", "k"}`; X25519 and Ed25519 keys
//! `{"kty": "OKP", "crv", "x", "d"}`. Binary fields are base64url; padded
//! and standard base64 are accepted too.

use base64::Engine;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use super::keys::{SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey, X25519SecretKey};

/// One decoded JWK.
pub(crate) enum Jwk {
    Symmetric(SymmetricKey),
    X25519Secret(X25519SecretKey),
    X25519Public(X25519PublicKey),
    Signing(Option<String>, SigningKey),
    Verifying(Option<String>, VerifyingKey),
}

fn b64(field: &str, v: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    let trimmed = v.trim_end_matches('=');
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(trimmed);
    let std = || base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed);
    url.or_else(|_| std()).map(Zeroizing::new).map_err(|_| format!("field {field:?} is not base64"))
}

fn array32(field: &str, v: &str) -> Result<Zeroizing<[u8; 32]>, String> {
    let bytes = b64(field, v)?;
    let mut out = Zeroizing::new([0u8; 32]);
    if bytes.len() != 32 {
        return Err(format!("field {field:?} has {} bytes, not 32", bytes.len()));
    }
    out.copy_from_slice(&bytes);
    Ok(out)
}

fn str_field<'a>(o: &'a Map<String, Value>, field: &str) -> Result<Option<&'a str>, String> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("field {field:?} is not a string")),
    }
}

/// Decodes one JWK object.
pub(crate) fn decode(v: &Value) -> Result<Jwk, String> {
    let o = v.as_object().ok_or("a JWK must be a JSON object")?;
    let kid = str_field(o, "kid")?.map(str::to_string);
    // cryptotensors writes "okp" in lowercase and leaves out "crv" (its
    // "alg" says the curve): both are accepted.
    let kty = str_field(o, "kty")?.ok_or("the JWK has no \"kty\"")?.to_ascii_lowercase();
    let alg = str_field(o, "alg")?.map(|a| a.to_ascii_lowercase().replace('-', ""));
    match kty.as_str() {
        "oct" => {
            let k = b64("k", str_field(o, "k")?.ok_or("a symmetric JWK needs \"k\"")?)?;
            let alg = str_field(o, "alg")?.map(str::to_string);
            // Without a kid: cryptotensors' keys may have none.
            let key = match kid {
                Some(kid) => SymmetricKey::new(kid, &k),
                None => SymmetricKey::without_kid(&k),
            };
            key.map(|k| Jwk::Symmetric(k.with_alg(alg))).map_err(|e| e.to_string())
        }
        "okp" => {
            let crv = match (str_field(o, "crv")?, alg.as_deref()) {
                (Some(c), _) => c,
                (None, Some("ed25519" | "eddsa")) => "Ed25519",
                (None, Some("x25519")) => "X25519",
                _ => return Err("an OKP JWK needs \"crv\"".into()),
            };
            let x = str_field(o, "x")?.map(|x| array32("x", x)).transpose()?;
            let d = str_field(o, "d")?.map(|d| array32("d", d)).transpose()?;
            match crv {
                "X25519" => {
                    let kid = kid.ok_or("an X25519 JWK needs a \"kid\"")?;
                    match (d, x) {
                        (Some(d), x) => {
                            let key = X25519SecretKey::from_bytes(kid, *d).map_err(|e| e.to_string())?;
                            if x.is_some_and(|x| *x != *key.public_key().bytes()) {
                                return Err("the X25519 JWK's \"x\" is not the public half of its \"d\"".into());
                            }
                            Ok(Jwk::X25519Secret(key))
                        }
                        (None, Some(x)) => {
                            X25519PublicKey::new(kid, *x).map(Jwk::X25519Public).map_err(|e| e.to_string())
                        }
                        (None, None) => Err("an X25519 JWK needs \"x\" or \"d\"".into()),
                    }
                }
                "Ed25519" => match (d, x) {
                    (Some(d), x) => {
                        let key = SigningKey::from_seed(*d).map_err(|e| e.to_string())?;
                        if x.is_some_and(|x| *x != key.verifying_key().0) {
                            return Err("the Ed25519 JWK's \"x\" is not the public half of its \"d\"".into());
                        }
                        Ok(Jwk::Signing(kid, key))
                    }
                    (None, Some(x)) => Ok(Jwk::Verifying(kid, VerifyingKey(*x))),
                    (None, None) => Err("an Ed25519 JWK needs \"x\" or \"d\"".into()),
                },
                other => Err(format!("unsupported OKP curve {other:?} (X25519 and Ed25519 are)")),
            }
        }
        other => Err(format!("unsupported JWK kty {other:?} (\"oct\" and \"OKP\" are)")),
    }
}

/// Decodes a JWK, a JWK set (`{"keys": [...]}`) or a JSON array of JWKs.
pub(crate) fn decode_all(v: &Value) -> Result<Vec<Jwk>, String> {
    match v {
        Value::Array(list) => list.iter().map(decode).collect(),
        Value::Object(o) if o.contains_key("keys") && !o.contains_key("kty") => match &o["keys"] {
            Value::Array(list) => list.iter().map(decode).collect(),
            _ => Err("\"keys\" of a JWK set must be an array".into()),
        },
        other => decode(other).map(|k| vec![k]),
    }
}

fn enc(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The JWK of a symmetric key (secret).
pub(crate) fn symmetric(k: &SymmetricKey) -> Value {
    let mut v = serde_json::json!({"kty": "oct", "k": enc(k.secret_bytes())});
    if k.has_kid() {
        v["kid"] = Value::String(k.kid().to_string());
    }
    if let Some(alg) = k.alg() {
        v["alg"] = Value::String(alg.to_string());
    }
    v
}

/// The JWK of an X25519 key: public only, or with its secret.
pub(crate) fn x25519(k: &X25519SecretKey, secret: bool) -> Value {
    let mut v = serde_json::json!({"kty": "OKP", "crv": "X25519", "kid": k.kid(), "x": enc(k.public_key().bytes())});
    if secret {
        v["d"] = Value::String(enc(&k.secret_bytes()[..]));
    }
    v
}

/// The JWK of an X25519 public key.
pub(crate) fn x25519_public(k: &X25519PublicKey) -> Value {
    serde_json::json!({"kty": "OKP", "crv": "X25519", "kid": k.kid(), "x": enc(k.bytes())})
}

/// The JWK of an Ed25519 key: public only, or with its secret.
pub(crate) fn ed25519(k: &SigningKey, kid: Option<&str>, secret: bool) -> Value {
    let mut v = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": enc(&k.verifying_key().0)});
    if let Some(kid) = kid {
        v["kid"] = Value::String(kid.to_string());
    }
    if secret {
        v["d"] = Value::String(enc(k.seed()));
    }
    v
}

/// The JWK of an Ed25519 public key.
pub(crate) fn verifying(k: &VerifyingKey, kid: Option<&str>) -> Value {
    let mut v = serde_json::json!({"kty": "OKP", "crv": "Ed25519", "x": enc(&k.0)});
    if let Some(kid) = kid {
        v["kid"] = Value::String(kid.to_string());
    }
    v
}

/// A JWK (any form the key ring reads) in cryptotensors' dialect, which its
/// `register_direct_key_provider` requires: lowercase `kty` (`oct`, `okp`),
/// an `alg` (`aes128gcm` / `aes256gcm` by the key's length, or its own;
/// `ed25519`), a `kid`, binary fields in standard padded base64, no `crv`.
///
/// # Errors
/// A key it cannot decode, an X25519 key (cryptotensors has none), a key
/// without a kid (its registry refuses one).
pub fn to_cryptotensors(v: &Value) -> Result<Value, String> {
    let std = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let kid = |kid: Option<&str>| -> Result<String, String> {
        kid.filter(|k| !k.is_empty())
            .map(str::to_string)
            .ok_or_else(|| "cryptotensors needs a key id: give the key a kid".to_string())
    };
    match decode(v)? {
        Jwk::Symmetric(k) => {
            let alg = match (k.alg(), k.secret_bytes().len()) {
                (Some(alg), _) => alg.to_string(),
                (None, 16) => "aes128gcm".into(),
                (None, 32) => "aes256gcm".into(),
                (None, n) => return Err(format!("cryptotensors keys are 16 or 32 bytes, not {n}")),
            };
            let kid = kid(k.has_kid().then(|| k.kid()))?;
            Ok(serde_json::json!({"kty": "oct", "alg": alg, "kid": kid, "k": std(k.secret_bytes())}))
        }
        Jwk::Signing(id, k) => Ok(serde_json::json!({
            "kty": "okp", "alg": "ed25519", "kid": kid(id.as_deref())?,
            "x": std(&k.verifying_key().0), "d": std(k.seed()),
        })),
        Jwk::Verifying(id, k) => {
            Ok(serde_json::json!({"kty": "okp", "alg": "ed25519", "kid": kid(id.as_deref())?, "x": std(&k.0)}))
        }
        Jwk::X25519Secret(_) | Jwk::X25519Public(_) => {
            Err("cryptotensors has no X25519 keys: use a symmetric key (and an Ed25519 one to sign)".into())
        }
    }
}

impl SymmetricKey {
    /// The key as a JWK (`kty` `oct`), secret included.
    pub fn to_jwk(&self) -> serde_json::Value {
        symmetric(self)
    }
}

impl X25519SecretKey {
    /// The key as a JWK (`kty` `OKP`, `crv` `X25519`); with `secret`, its
    /// secret half `d` too.
    pub fn to_jwk(&self, secret: bool) -> serde_json::Value {
        x25519(self, secret)
    }
}

impl X25519PublicKey {
    /// The key as a JWK (`kty` `OKP`, `crv` `X25519`).
    pub fn to_jwk(&self) -> serde_json::Value {
        x25519_public(self)
    }
}

impl SigningKey {
    /// The key as a JWK (`kty` `OKP`, `crv` `Ed25519`); with `secret`, its
    /// seed `d` too.
    pub fn to_jwk(&self, kid: Option<&str>, secret: bool) -> serde_json::Value {
        ed25519(self, kid, secret)
    }
}

impl VerifyingKey {
    /// The key as a JWK (`kty` `OKP`, `crv` `Ed25519`).
    pub fn to_jwk(&self, kid: Option<&str>) -> serde_json::Value {
        verifying(self, kid)
    }
}
