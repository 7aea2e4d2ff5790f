//! Uploads against moto's S3 server: a file in parts with bounded memory,
//! a small object put whole, size, get, list and delete, and what each
//! costs in requests.

use deathtensors_io::{ErrorKind, ReadOptions};
use deathtensors_remote::{delete, get, list, open, put, size, upload, RemoteOptions};

use crate::s3::s3_options;
use crate::servers::{moto, request};
use crate::{scratch, write_model};

#[test]
fn a_file_over_a_part_uploads_in_parts_and_reads_back() {
    let dir = scratch("upload-parts");
    let Some(server) = moto(&dir) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    let path = dir.join("m.dt");
    // 12 MiB and a header: three parts of S3's smallest (5 MiB).
    let tensors = write_model(&path, 3, 4 << 20, 0);
    let len = std::fs::metadata(&path).unwrap().len();
    let options = RemoteOptions { part_size: 1 << 20, concurrency: 2, ..s3_options(&server) };
    assert_eq!(upload(&path, "s3://ckpt/run/m.dt", &options).unwrap(), len);
    // Create, three parts, complete.
    assert_eq!((options.stats.writes(), options.stats.bytes_sent()), (5, len));
    assert_eq!(size("s3://ckpt/run/m.dt", &options).unwrap(), Some(len));
    let reader = open("s3://ckpt/run/m.dt", &options, ReadOptions::default()).unwrap();
    assert!(reader.read(&tensors[2].0).unwrap() == tensors[2].1);
    reader.verify().unwrap();
}

#[test]
fn small_objects_put_get_list_and_delete() {
    let dir = scratch("upload-small");
    let Some(server) = moto(&dir) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    let options = s3_options(&server);
    let path = dir.join("small.dt");
    write_model(&path, 2, 1000, 0);
    let len = std::fs::metadata(&path).unwrap().len();
    upload(&path, "s3://ckpt/run/rank-0.dt", &options).unwrap();
    assert_eq!(options.stats.writes(), 1, "a file of one part is one PUT");
    put("s3://ckpt/run/meta.json", b"{}".to_vec(), &options).unwrap();
    put("s3://ckpt/run/deeper/x", b"x".to_vec(), &options).unwrap();
    put("s3://ckpt/runner", b"y".to_vec(), &options).unwrap();
    assert_eq!(get("s3://ckpt/run/meta.json", 2, &options).unwrap().as_deref(), Some(&b"{}"[..]));
    let err = get("s3://ckpt/run/meta.json", 1, &options).unwrap_err();
    assert!(err.to_string().contains("2 bytes, over the limit of 1"), "{err}");
    assert_eq!(get("s3://ckpt/run/none", 10, &options).unwrap(), None);
    assert_eq!(size("s3://ckpt/run/none", &options).unwrap(), None);
    let mut names = list("s3://ckpt/run", &options).unwrap();
    names.sort();
    assert_eq!(names, [("meta.json".to_string(), 2), ("rank-0.dt".to_string(), len)]);
    delete("s3://ckpt/run/meta.json", &options).unwrap();
    delete("s3://ckpt/run/meta.json", &options).unwrap();
    assert_eq!(list("s3://ckpt/run", &options).unwrap().len(), 1);
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
