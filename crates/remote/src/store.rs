//! From a URL and options to an object_store store and the object's path.

use std::io;
use std::str::FromStr;
use std::sync::{Arc, Once};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, ObjectStoreScheme, RetryConfig};
use url::Url;

use crate::options::Resolved;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// An error and its sources in words, each source that its parent's
/// message does not already hold appended: object_store's messages alone
/// can end at "error sending request" or "builder error", and the reason
/// ("operation timed out", "URL scheme is not allowed") is a source.
pub(crate) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let message = s.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = s.source();
    }
    text
}

/// Installs ring as rustls' provider once: reqwest is built without one
/// (no aws-lc), and rustls refuses to guess.
fn install_crypto() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Err: the process (an application embedding us) installed one.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Options whose value names a plain-HTTP endpoint: then plain HTTP is
/// allowed (a local S3-compatible server, Azurite, a GCS emulator), as the
/// caller asked for it. S3's endpoint, Azure's (`azure_storage_endpoint`,
/// `azure_endpoint`; `endpoint` is both stores' alias) and GCS's base URL.
const ENDPOINT_KEYS: [&str; 8] = [
    "aws_endpoint",
    "aws_endpoint_url",
    "endpoint",
    "endpoint_url",
    "azure_storage_endpoint",
    "azure_endpoint",
    "google_base_url",
    "base_url",
];

/// The store holding `url` and the object's path in it, configured from
/// the environment, then `resolved`.
///
/// # Errors
/// `InvalidInput` for a URL that is not `s3://`, `gs://`, `az://`
/// (`abfs://`, `azure://`) or `http(s)://`, an unknown option, an
/// `http://` URL or endpoint with `allow_http` false, or a configuration
/// the store's builder refuses.
pub(crate) fn build(url: &str, resolved: &Resolved) -> io::Result<(Arc<dyn ObjectStore>, Path)> {
    let options = &resolved.options;
    install_crypto();
    let parsed = Url::parse(url).map_err(|e| invalid(format!("{url:?} is not a URL: {e}")))?;
    let (scheme, path) =
        ObjectStoreScheme::parse(&parsed).map_err(|e| invalid(format!("{url:?} is not a store's URL: {e}")))?;
    let path = Path::parse(path).map_err(|e| invalid(format!("{url:?} has an invalid object path: {e}")))?;
    let env_endpoint = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"].iter().find_map(|k| std::env::var(k).ok());
    let plain_endpoint = options
        .storage_options
        .iter()
        .filter(|(k, _)| ENDPOINT_KEYS.contains(&k.to_ascii_lowercase().as_str()))
        .map(|(_, v)| v.clone())
        .chain(env_endpoint)
        .find(|v| v.starts_with("http://"));
    let plain = if parsed.scheme() == "http" { Some(url) } else { plain_endpoint.as_deref() };
    // Refused here in words: object_store's client would only say "builder
    // error" at the first request.
    if let (Some(false), Some(plain)) = (resolved.allow_http, plain) {
        let what = if plain == url { "URL" } else { "endpoint" };
        return Err(invalid(format!("allow_http is false but the {what} is http:// ({plain})")));
    }
    // Each request (a part of at most `part_size`) must finish in `timeout`;
    // a stalled connection is retried instead of hanging, until
    // `retry_timeout` (which object.rs also holds the whole read to).
    let client = ClientOptions::new()
        .with_allow_http(resolved.allow_http.unwrap_or(plain.is_some()))
        .with_connect_timeout(options.connect_timeout)
        .with_timeout(options.timeout);
    let retry = RetryConfig {
        backoff: BackoffConfig { init_backoff: options.backoff, max_backoff: crate::options::MAX_BACKOFF, base: 2.0 },
        max_retries: options.retries as usize,
        retry_timeout: options.retry_timeout,
    };
    let unknown = |key: &str| invalid(format!("unknown storage option {key:?} for {url}"));
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = AmazonS3Builder::from_env().with_url(url).with_client_options(client).with_retry(retry.clone());
            for (k, v) in &options.storage_options {
                b = b.with_config(AmazonS3ConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| unknown(k))?, v);
            }
            Arc::new(b.build().map_err(|e| invalid(format!("cannot reach {url}: {}", causes(&e))))?)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_client_options(client)
                .with_retry(retry.clone());
            for (k, v) in &options.storage_options {
                b = b.with_config(GoogleConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| unknown(k))?, v);
            }
            Arc::new(b.build().map_err(|e| invalid(format!("cannot reach {url}: {}", causes(&e))))?)
        }
        ObjectStoreScheme::MicrosoftAzure => {
            let mut b =
                MicrosoftAzureBuilder::from_env().with_url(url).with_client_options(client).with_retry(retry.clone());
            for (k, v) in &options.storage_options {
                b = b.with_config(AzureConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| unknown(k))?, v);
            }
            Arc::new(b.build().map_err(|e| invalid(format!("cannot reach {url}: {}", causes(&e))))?)
        }
        ObjectStoreScheme::Http => {
            let base = &parsed[..url::Position::BeforePath];
            let mut b = HttpBuilder::new().with_url(base).with_client_options(client).with_retry(retry.clone());
            for (k, v) in &options.storage_options {
                b = b.with_config(ClientConfigKey::from_str(&k.to_ascii_lowercase()).map_err(|_| unknown(k))?, v);
            }
            Arc::new(b.build().map_err(|e| invalid(format!("cannot reach {url}: {}", causes(&e))))?)
        }
        other => return Err(invalid(format!("{url}: {other:?} URLs are not remote stores (use a path)"))),
    };
    Ok((store, path))
}
