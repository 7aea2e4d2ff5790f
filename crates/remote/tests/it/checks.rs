//! The checks every object store's tests make, whatever the emulator:
//! opening costs one request, a tensor is its bytes in one more, all the
//! data equals the local file with its digests checked, and a missing
//! object is `NotFound` naming its URL.

use std::path::Path;

use deathtensors_io::{ErrorKind, ReadOptions, Reader};
use deathtensors_remote::{open, RemoteOptions};

/// Opens `url` (a copy of the local file at `path`, holding `tensors`) and
/// checks the requests and bytes of opening and of reading one tensor, the
/// names listed, the digests and all the data.
pub fn open_list_read_verify(url: &str, options: &RemoteOptions, path: &Path, tensors: &[(String, Vec<u8>)]) {
    let reader = open(url, options, ReadOptions::default()).unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
    assert_eq!(options.stats.requests(), 1, "opening {url} must be one request");
    assert!(options.stats.bytes() <= 64 << 10, "opening {url} read {} bytes", options.stats.bytes());
    let names: Vec<&str> = reader.header().tensors().iter().map(|t| t.name.as_str()).collect();
    let expected: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, expected, "the tensors listed from {url}");
    let before = options.stats.bytes();
    let (name, data) = &tensors[tensors.len() / 2];
    let read = reader.read(name).unwrap_or_else(|e| panic!("cannot read {name} from {url}: {e}"));
    assert!(&read == data, "{name} read from {url} differs from what was uploaded");
    assert_eq!(options.stats.requests(), 2, "reading {name} from {url} must be one request");
    assert_eq!(options.stats.bytes() - before, data.len() as u64, "bytes fetched for {name} from {url}");
    reader.verify().unwrap_or_else(|e| panic!("digests of {url}: {e}"));
    let local = Reader::open(path).unwrap();
    let mut expected = vec![0u8; local.header().data_len() as usize];
    local.read_data_into(&mut expected).unwrap();
    let mut all = vec![0u8; expected.len()];
    reader.read_data_into(&mut all).unwrap_or_else(|e| panic!("cannot load all of {url}: {e}"));
    assert!(all == expected, "the data of {url} differs from the local file's");
}

/// Opening `url` fails as `NotFound`, and the error names the URL.
pub fn not_found(url: &str, options: &RemoteOptions) {
    let err = open(url, options, ReadOptions::default()).expect_err(url);
    assert!(
        matches!(err.kind(), ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound),
        "{url}: not NotFound but {err}"
    );
    assert!(err.to_string().contains(url), "the error does not name {url}: {err}");
}
