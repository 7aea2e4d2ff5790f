//! What kind of file system a file is on: a local disk, or one that
//! serves each page over a network or through a user-space daemon (NFS,
//! SMB/CIFS, Lustre, GPFS, Ceph, 9p, FUSE), where a mapping faults page by
//! page, each fault a round trip, and large parallel positioned reads into
//! memory the reader owns are many times faster (docs/ARCHITECTURE.md,
//! `fs/`).

use std::fs::File;

/// Where a file's pages come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mount {
    /// A local file system (or one the system does not name): mapping is
    /// cheap.
    Local,
    /// A network or user-space file system, by name (`"nfs"`, `"fuse"`):
    /// read, do not map.
    Shared(&'static str),
}

/// Linux `statfs` magics of file systems whose pages cross a network or a
/// user-space daemon (`include/uapi/linux/magic.h` and the file systems'
/// own headers).
#[cfg(target_os = "linux")]
const SHARED_MAGICS: &[(u32, &str)] = &[
    (0x6969, "nfs"),
    (0x517B, "smb"),
    (0xFF53_4D42, "cifs"),
    (0xFE53_4D42, "smb2"),
    (0x6573_5546, "fuse"),
    (0x0102_1997, "9p"),
    (0x0BD0_0BD0, "lustre"),
    (0x4750_4653, "gpfs"),
    (0x00C3_6400, "ceph"),
    (0x5346_414F, "afs"),
    (0x6B41_4653, "afs"),
];

/// macOS `statfs` type names of such file systems.
#[cfg(target_os = "macos")]
const SHARED_NAMES: &[&str] = &["nfs", "smbfs", "afpfs", "webdav", "macfuse", "osxfuse", "fusefs", "ftp", "cifs"];

/// The kind of file system `file` is on; `Local` when the system cannot
/// say (the question failed, or no check is made here).
pub fn mount_of(file: &File) -> Mount {
    #[cfg(target_os = "linux")]
    {
        let Ok(st) = rustix::fs::fstatfs(file) else { return Mount::Local };
        // `f_type` is a signed long holding a 32-bit magic.
        #[allow(clippy::unnecessary_cast)]
        let magic = (st.f_type as u64 & 0xFFFF_FFFF) as u32;
        match SHARED_MAGICS.iter().find(|(m, _)| *m == magic) {
            Some((_, name)) => Mount::Shared(name),
            None => Mount::Local,
        }
    }
    #[cfg(target_os = "macos")]
    {
        let Ok(st) = rustix::fs::fstatfs(file) else { return Mount::Local };
        let name: Vec<u8> = st.f_fstypename.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        match SHARED_NAMES.iter().find(|n| n.as_bytes() == name.as_slice()) {
            Some(name) => Mount::Shared(name),
            None => Mount::Local,
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "macos")))]
    {
        let _ = file;
        Mount::Local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temp_file_is_local_and_proc_is_not_taken_for_a_network() {
        let path = std::env::temp_dir().join(format!("dt-mount-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        assert_eq!(mount_of(&file), Mount::Local);
        drop(file);
        std::fs::remove_file(&path).unwrap();
        #[cfg(target_os = "linux")]
        {
            // procfs is local (magic 0x9fa0), and so is /dev/shm's tmpfs.
            assert_eq!(mount_of(&File::open("/proc/self/status").unwrap()), Mount::Local);
            assert!(SHARED_MAGICS.iter().any(|(m, n)| *m == 0x6573_5546 && *n == "fuse"));
        }
    }
}
