//! Uploads against moto's S3 server and Azurite: a file in parts with
//! bounded memory, a small object put whole, size, get, list and delete,
//! and what each costs in requests; the same checks on each store. On
//! fake-gcs-server only size, get, list and delete: it does not implement
//! the XML API's uploads that object_store's GCS client sends (a `PUT` of
//! an object, multipart uploads; fsouza/fake-gcs-server issues 331 and 852),
//! so objects are put there through its JSON API.

use std::path::Path;

use deathtensors_io::{ErrorKind, ReadOptions};
use deathtensors_remote::{delete, get, list, open, put, size, upload, RemoteOptions};

use crate::s3::s3_options;
use crate::servers::{azurite, fake_gcs, moto, request};
use crate::{scratch, write_model};

/// Uploads a file of three parts to `{base}/run/m.dt` (the bucket of
/// `base` exists) and reads it back.
fn a_file_over_a_part_uploads_in_parts(dir: &Path, base: &str, options: RemoteOptions) {
    let path = dir.join("m.dt");
    // 12 MiB and a header: three parts of S3's smallest (5 MiB).
    let tensors = write_model(&path, 3, 4 << 20, 0);
    let len = std::fs::metadata(&path).unwrap().len();
    let options = RemoteOptions { part_size: 1 << 20, concurrency: 2, ..options };
    let url = format!("{base}/run/m.dt");
    assert_eq!(upload(&path, &url, &options).unwrap(), len);
    // Create, three parts, complete.
    assert_eq!((options.stats.writes(), options.stats.bytes_sent()), (5, len));
    assert_eq!(size(&url, &options).unwrap(), Some(len));
    let reader = open(&url, &options, ReadOptions::default()).unwrap();
    assert!(reader.read(&tensors[2].0).unwrap() == tensors[2].1);
    reader.verify().unwrap();
}

/// Puts, gets, lists and deletes small objects under `{base}/run` (the
/// bucket of `base` exists).
fn small_objects_put_get_list_and_delete(dir: &Path, base: &str, options: RemoteOptions) {
    let path = dir.join("small.dt");
    write_model(&path, 2, 1000, 0);
    let len = std::fs::metadata(&path).unwrap().len();
    let at = |name: &str| format!("{base}/{name}");
    upload(&path, &at("run/rank-0.dt"), &options).unwrap();
    assert_eq!(options.stats.writes(), 1, "a file of one part is one PUT");
    put(&at("run/meta.json"), b"{}".to_vec(), &options).unwrap();
    put(&at("run/deeper/x"), b"x".to_vec(), &options).unwrap();
    put(&at("runner"), b"y".to_vec(), &options).unwrap();
    // A put replaces an object whole.
    put(&at("run/meta.json"), b"{}".to_vec(), &options).unwrap();
    assert_eq!(get(&at("run/meta.json"), 2, &options).unwrap().as_deref(), Some(&b"{}"[..]));
    let err = get(&at("run/meta.json"), 1, &options).unwrap_err();
    assert!(err.to_string().contains("2 bytes, over the limit of 1"), "{err}");
    assert_eq!(get(&at("run/none"), 10, &options).unwrap(), None);
    assert_eq!(size(&at("run/none"), &options).unwrap(), None);
    assert_eq!(size(&at("run/rank-0.dt"), &options).unwrap(), Some(len));
    let mut names = list(&at("run"), &options).unwrap();
    names.sort();
    assert_eq!(names, [("meta.json".to_string(), 2), ("rank-0.dt".to_string(), len)]);
    delete(&at("run/meta.json"), &options).unwrap();
    delete(&at("run/meta.json"), &options).unwrap();
    assert_eq!(list(&at("run"), &options).unwrap(), [("rank-0.dt".to_string(), len)]);
    assert_eq!(get(&at("run/meta.json"), 10, &options).unwrap(), None);
}

#[test]
fn s3_a_file_over_a_part_uploads_in_parts_and_reads_back() {
    let dir = scratch("upload-parts");
    let Some(server) = moto(&dir) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    a_file_over_a_part_uploads_in_parts(&dir, "s3://ckpt", s3_options(&server));
}

#[test]
fn s3_small_objects_put_get_list_and_delete() {
    let dir = scratch("upload-small");
    let Some(server) = moto(&dir) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    small_objects_put_get_list_and_delete(&dir, "s3://ckpt", s3_options(&server));
}

#[test]
fn gs_size_get_list_and_delete() {
    let dir = scratch("gs-upload-small");
    let Some(server) = fake_gcs(&dir) else { return };
    crate::gcs::upload(&server, "ckpt", &[]);
    let options = crate::gcs::gcs_options(&server);
    for (name, body) in [("run%2Fmeta.json", &b"{}"[..]), ("run%2Fdeeper%2Fx", b"x"), ("runner", b"y")] {
        let path = format!("/upload/storage/v1/b/ckpt/o?uploadType=media&name={name}");
        assert_eq!(request(server.port, "POST", &path, body), 200, "{name}");
    }
    assert_eq!(get("gs://ckpt/run/meta.json", 2, &options).unwrap().as_deref(), Some(&b"{}"[..]));
    let err = get("gs://ckpt/run/meta.json", 1, &options).unwrap_err();
    assert!(err.to_string().contains("2 bytes, over the limit of 1"), "{err}");
    assert_eq!(get("gs://ckpt/run/none", 10, &options).unwrap(), None);
    assert_eq!(size("gs://ckpt/run/none", &options).unwrap(), None);
    assert_eq!(size("gs://ckpt/run/meta.json", &options).unwrap(), Some(2));
    assert_eq!(list("gs://ckpt/run", &options).unwrap(), [("meta.json".to_string(), 2)]);
    delete("gs://ckpt/run/meta.json", &options).unwrap();
    delete("gs://ckpt/run/meta.json", &options).unwrap();
    assert_eq!(list("gs://ckpt/run", &options).unwrap(), []);
    assert_eq!(get("gs://ckpt/run/meta.json", 10, &options).unwrap(), None);
}

#[test]
fn az_a_file_over_a_part_uploads_in_parts_and_reads_back() {
    let dir = scratch("az-upload-parts");
    let Some(server) = azurite(&dir) else { return };
    crate::azure::upload(&server, "ckpt", &[]);
    a_file_over_a_part_uploads_in_parts(&dir, "az://ckpt", crate::azure::azure_options(&server));
}

#[test]
fn az_small_objects_put_get_list_and_delete() {
    let dir = scratch("az-upload-small");
    let Some(server) = azurite(&dir) else { return };
    crate::azure::upload(&server, "ckpt", &[]);
    small_objects_put_get_list_and_delete(&dir, "az://ckpt", crate::azure::azure_options(&server));
}

#[test]
fn an_upload_to_no_bucket_fails_naming_the_url() {
    let dir = scratch("upload-nobucket");
    let Some(server) = moto(&dir) else { return };
    let options = s3_options(&server);
    let err = put("s3://nobucket/x", b"x".to_vec(), &options).unwrap_err();
    assert!(err.to_string().contains("s3://nobucket/x"), "{err}");
    let err = upload(&dir.join("absent.dt"), "s3://nobucket/x", &options).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound), "{err}");
    assert!(err.to_string().contains("absent.dt"), "{err}");
}
