//! Linking macOS builds without Apple's SDK: a stand-in SDK of text stubs.
//!
//! The CLI and the wheel link two system frameworks: Security and
//! CoreFoundation (`rustls-platform-verifier`, which reqwest 0.13 always
//! uses with rustls, verifies certificates with the system's trust store;
//! chrono's `iana-time-zone` asks CoreFoundation for the local time zone).
//! zig links for macOS with its own libSystem, but ships no frameworks, and
//! Apple's SDK may not be redistributed. A framework's `.tbd` file is only
//! a text list of the symbols a library exports and where it is installed:
//! `xtask/macos/<Framework>.symbols` list the symbols our dependencies use
//! (the link fails naming any that is missing), and `sdk()` writes them as
//! `.tbd` files into a folder given to the build as `SDKROOT`. The binary
//! then loads the real frameworks from `/System/Library/Frameworks` on the
//! Mac, as one linked against Apple's SDK does: certificates are checked by
//! the system's trust store and time zones are the system's.

use std::path::PathBuf;

use crate::util::root;

/// The frameworks stubbed, with the version their stubs claim.
const FRAMEWORKS: &[(&str, &str)] = &[("CoreFoundation", "1971"), ("Security", "61040.1")];

/// Writes the stand-in SDK (once per change of the symbol lists) and
/// returns its folder.
pub fn sdk() -> Result<PathBuf, String> {
    let sdk = root().join("target/dist-tools/macos-sdk");
    for (name, version) in FRAMEWORKS {
        let list = root().join(format!("xtask/macos/{name}.symbols"));
        let text = std::fs::read_to_string(&list).map_err(|e| format!("{}: {e}", list.display()))?;
        let symbols: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        let dir = sdk.join(format!("System/Library/Frameworks/{name}.framework"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let tbd = dir.join(format!("{name}.tbd"));
        let body = stub(name, version, &symbols);
        if std::fs::read_to_string(&tbd).ok().as_deref() != Some(body.as_str()) {
            std::fs::write(&tbd, body).map_err(|e| format!("{}: {e}", tbd.display()))?;
        }
    }
    Ok(sdk)
}

/// A TAPI `.tbd` (version 4) of framework `name` exporting `symbols`.
fn stub(name: &str, version: &str, symbols: &[&str]) -> String {
    let targets = "[ x86_64-macos, arm64-macos ]";
    let mut s = format!(
        "--- !tapi-tbd\ntbd-version:     4\ntargets:         {targets}\n\
         install-name:    '/System/Library/Frameworks/{name}.framework/Versions/A/{name}'\n\
         current-version: {version}\nexports:\n  - targets:         {targets}\n    symbols:         [ "
    );
    s.push_str(&symbols.join(",\n                       "));
    s.push_str(" ]\n...\n");
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_stub_lists_every_symbol_once_for_both_cpus() {
        let s = super::stub("Security", "1", &["_SecTrustEvaluateWithError", "_kSecClass"]);
        assert!(s.starts_with("--- !tapi-tbd\ntbd-version:     4\n"));
        assert!(s.contains("'/System/Library/Frameworks/Security.framework/Versions/A/Security'"));
        assert_eq!(s.matches("_kSecClass").count(), 1);
        assert!(s.ends_with(" ]\n...\n"));
    }
}
