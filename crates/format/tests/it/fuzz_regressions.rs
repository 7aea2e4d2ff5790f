//! Fuzz regressions: every file in `testdata/fuzz/` goes through the
//! property of the fuzz target it is named after (`<target>-<hash>`).
//!
//! The properties are the fuzz targets' own (`deathtensors-testkit`'s
//! `properties`, which the fuzz crate calls), so that these tests check
//! exactly what the fuzzer checked.
//! A crash that needs a note on its root cause also gets a one-line test
//! below, next to that note.

use deathtensors_testkit::properties;

use std::path::PathBuf;

/// Runs the file `testdata/fuzz/<name>` through its target's property.
#[track_caller]
fn check(name: &str) {
    let path = crate::testdata().join("fuzz").join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let property = name
        .split_once('-')
        .and_then(|(target, _)| properties::TARGETS.iter().find(|(t, _)| *t == target))
        .map(|&(_, property)| property)
        .unwrap_or_else(|| {
            let names: Vec<&str> = properties::TARGETS.iter().map(|(t, _)| *t).collect();
            panic!("{name}: not named <target>-<hash> with a target among {names:?}")
        });
    property(&bytes);
}

/// The regression files: every file of `testdata/fuzz/` but its README.
fn regressions() -> Vec<String> {
    let dir: PathBuf = crate::testdata().join("fuzz");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "README.md")
        .collect();
    names.sort();
    names
}

#[test]
fn every_regression_file_holds_its_property() {
    for name in regressions() {
        check(&name);
    }
}

// A safetensors file whose header re-encodes to 640 bytes (636 of JSON, padded
// to a multiple of 8) could not be read back: the length field starts with
// 0x80 0x02, which format sniffing took for a Python pickle's magic number and
// refused before trying safetensors. Fixed in f144a7c (`Head::needed` detects
// safetensors, a length within the limit then `{`, before sniffing).
#[test]
fn safetensors_header_length_like_a_pickle_magic() {
    check("file-443373b217bc2d68343dd719391eb127c3246be1");
}

// The parser accepted any power-of-two alignment up to 2^30, but the encoder
// pads the head so that the blob starts at a multiple of the alignment, and
// refuses a head longer than the default header limit (100 MiB): a header
// with alignment 2^27 decoded but could not be encoded. Fixed in e0fe5d8
// (`MAX_ALIGNMENT` is now 1 MiB, so such a header is `InvalidAlignment`).
#[test]
fn alignment_too_large_to_encode() {
    check("deathtensors_header-332323ee7ed561c4f5d58c907a8f1eab0d0fa838");
    // The largest alignment a header may declare decodes and round-trips.
    let json = format!(
        r#"{{"format":"deathtensors","format_version":1,"alignment":{},"tensors":{{}}}}"#,
        deathtensors_format::MAX_ALIGNMENT
    );
    deathtensors_format::Header::parse_deathtensors(json.as_bytes(), &Default::default()).unwrap();
    properties::deathtensors_header(json.as_bytes());
}

#[test]
fn the_seeds_hold_their_properties() {
    // The seeds are valid files and headers, so these run every property to
    // its end, which an empty `testdata/fuzz/` would not.
    let seeds = crate::testdata().join("../fuzz/seeds");
    for &(target, property) in properties::TARGETS {
        let dir = seeds.join(target);
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            property(&std::fs::read(entry.unwrap().path()).unwrap());
            count += 1;
        }
        assert!(count > 0, "no seed in {}", dir.display());
    }
}
