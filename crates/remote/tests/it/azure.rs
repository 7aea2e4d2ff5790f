//! `az://` against Azurite's Blob service: the store reached through the
//! `azure_storage_endpoint` option (per test, no process-wide variable),
//! signed with the emulator's well-known account and key.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use deathtensors_remote::RemoteOptions;

use crate::checks::{not_found, open_list_read_verify};
use crate::servers::{azurite, request_with, Server};
use crate::{scratch, write_model};

/// Azurite's well-known account, the first segment of its URLs' paths.
const ACCOUNT: &str = "devstoreaccount1";

/// The well-known account's key (public, the same in every Azurite).
const KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Options reaching `server` as a plain-HTTP Azure endpoint.
pub(crate) fn azure_options(server: &Server) -> RemoteOptions {
    crate::http::options()
        .with("azure_storage_account_name", ACCOUNT)
        .with("azure_storage_account_key", KEY)
        .with("azure_storage_endpoint", format!("http://127.0.0.1:{}/{ACCOUNT}", server.port))
}

/// One request to Azurite for `path` (from the container on) with its
/// query, signed with the account's shared key: the status code. No
/// `x-ms-date` is sent: Azurite does not ask for one (Azure would).
fn signed(server: &Server, method: &str, path: &str, query: &[(&str, &str)], ms: &[(&str, &str)], body: &[u8]) -> u16 {
    let mut ms: Vec<(&str, &str)> = ms.iter().copied().chain([("x-ms-version", "2021-08-06")]).collect();
    ms.sort();
    let length = if body.is_empty() { String::new() } else { body.len().to_string() };
    let headers: String = ms.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let mut resource = format!("/{ACCOUNT}/{ACCOUNT}{path}");
    let mut sorted = query.to_vec();
    sorted.sort();
    for (k, v) in &sorted {
        resource.push_str(&format!("\n{k}:{v}"));
    }
    // The verb, 11 standard headers (only Content-Length is sent), the
    // x-ms- headers, the resource.
    let to_sign = format!("{method}\n\n\n{length}\n\n\n\n\n\n\n\n\n{headers}{resource}");
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &STANDARD.decode(KEY).unwrap());
    let signature = STANDARD.encode(ring::hmac::sign(&key, to_sign.as_bytes()));
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let target = format!("/{ACCOUNT}{path}?{}", query.join("&"));
    let mut all: Vec<(&str, String)> = ms.iter().map(|(k, v)| (*k, v.to_string())).collect();
    all.push(("Authorization", format!("SharedKey {ACCOUNT}:{signature}")));
    request_with(server.port, method, &target, &all, body)
}

/// Creates `container` and uploads `files` into it as block blobs.
pub(crate) fn upload(server: &Server, container: &str, files: &[std::path::PathBuf]) {
    let status = signed(server, "PUT", &format!("/{container}"), &[("restype", "container")], &[], b"");
    assert_eq!(status, 201, "Azurite did not create the container {container}");
    for f in files {
        let name = f.file_name().unwrap().to_str().unwrap();
        let body = std::fs::read(f).unwrap();
        let status =
            signed(server, "PUT", &format!("/{container}/{name}"), &[], &[("x-ms-blob-type", "BlockBlob")], &body);
        assert_eq!(status, 201, "Azurite did not store the blob {name}");
    }
}

#[test]
fn az_open_list_read_and_verify() {
    let dir = scratch("az-open");
    let Some(server) = azurite(&dir) else { return };
    let path = dir.join("m.dt");
    let tensors = write_model(&path, 6, 200_000, 0);
    upload(&server, "models", std::slice::from_ref(&path));
    open_list_read_verify("az://models/m.dt", &azure_options(&server), &path, &tensors);
}

#[test]
fn az_missing_blob_and_container_are_not_found() {
    let dir = scratch("az-404");
    let Some(server) = azurite(&dir) else { return };
    upload(&server, "empty", &[]);
    for url in ["az://empty/none.dt", "az://nocontainer/none.dt"] {
        not_found(url, &azure_options(&server));
    }
}
