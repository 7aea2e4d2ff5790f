//! Fuzz regressions: every file in `testdata/fuzz/` goes through the
//! property of the fuzz target it is named after (`<target>-<hash>`).
//!
//! The properties are the fuzz crate's own `fuzz/src/properties.rs`,
//! included by path so that these tests check exactly what the fuzzer
//! checked, without a dependency on the fuzz crate (nothing depends on it).
//! A crash that needs a note on its root cause also gets a one-line test
//! below, next to that note.

#[path = "../../../../fuzz/src/properties.rs"]
mod properties;

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
