//! `gs://` against fake-gcs-server: the store reached through the
//! `google_base_url` option (per test), with a service-account key that
//! disables OAuth (the emulator checks no credentials).

use deathtensors_remote::RemoteOptions;

use crate::checks::{not_found, open_list_read_verify};
use crate::servers::{request, Server};
use crate::{scratch, write_model};

/// A service-account key with no key: `disable_oauth` makes object_store
/// send no token, and fetch none.
const NO_OAUTH_KEY: &str = r#"{"private_key": "", "private_key_id": "", "client_email": "", "disable_oauth": true}"#;

/// Options reaching `server` as a plain-HTTP GCS endpoint.
pub(crate) fn gcs_options(server: &Server) -> RemoteOptions {
    crate::http::options()
        .with("google_service_account_key", NO_OAUTH_KEY)
        .with("google_base_url", format!("http://127.0.0.1:{}", server.port))
}

/// Creates `bucket` and uploads `files` into it through the JSON API (this
/// emulator's XML API serves reads, not uploads).
pub(crate) fn upload(server: &Server, bucket: &str, files: &[std::path::PathBuf]) {
    let body = format!(r#"{{"name": "{bucket}"}}"#);
    assert_eq!(request(server.port, "POST", "/storage/v1/b", body.as_bytes()), 200, "creating the bucket {bucket}");
    for f in files {
        let name = f.file_name().unwrap().to_str().unwrap();
        let path = format!("/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}");
        let status = request(server.port, "POST", &path, &std::fs::read(f).unwrap());
        assert_eq!(status, 200, "upload of {name}");
    }
}

#[test]
fn gs_open_list_read_and_verify() {
    let dir = scratch("gs-open");
    let Some(server) = crate::servers::fake_gcs(&dir) else { return };
    let path = dir.join("m.dt");
    let tensors = write_model(&path, 6, 200_000, 0);
    upload(&server, "models", std::slice::from_ref(&path));
    open_list_read_verify("gs://models/m.dt", &gcs_options(&server), &path, &tensors);
}

#[test]
fn gs_missing_object_and_bucket_are_not_found() {
    let dir = scratch("gs-404");
    let Some(server) = crate::servers::fake_gcs(&dir) else { return };
    upload(&server, "empty", &[]);
    for url in ["gs://empty/none.dt", "gs://nobucket/none.dt"] {
        not_found(url, &gcs_options(&server));
    }
}
