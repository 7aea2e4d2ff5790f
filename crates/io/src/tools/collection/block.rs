//! Block files: one deathtensors v1 file per block of rows (or, for a
//! tensorblob directory, one raw file), read and written with positioned
//! I/O.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use deathtensors_format::{Limits, RowLayout};

use crate::error::{Error, Result};
use crate::file::reader::read_head;
use crate::fs::pread::{read_exact_at, write_all_at};
use crate::fs::writeback::Writeback;

/// An open block file.
#[derive(Debug)]
pub(crate) struct BlockFile {
    pub(crate) file: File,
    pub(crate) path: PathBuf,
    /// Where row 0 starts in the file.
    pub(crate) data_start: u64,
}

impl BlockFile {
    /// Opens a block file and checks it against the layout: a deathtensors
    /// file whose one tensor spans the whole block, or (`raw`) a file of at
    /// least a block's bytes.
    pub(crate) fn open(path: &Path, layout: &RowLayout, writable: bool, raw: bool) -> Result<BlockFile> {
        let doing = "cannot open block file";
        let file = open_file(path, writable).map_err(|e| {
            if is_symlink(path) {
                Error::input("a block file must not be a symbolic link", path, doing)
            } else {
                Error::io(e, path, doing)
            }
        })?;
        BlockFile::from_file(file, path, layout, raw)
    }

    /// A block file already open as `file` (read from `path`), checked as
    /// [`BlockFile::open`] checks it.
    pub(crate) fn from_file(file: File, path: &Path, layout: &RowLayout, raw: bool) -> Result<BlockFile> {
        let doing = "cannot open block file";
        let len = file.metadata().map_err(|e| Error::io(e, path, doing))?.len();
        if raw {
            if len < layout.block_bytes() {
                return Err(Error::input(
                    format!(
                        "block file is {len} bytes, a block of {} rows needs {}",
                        layout.block_rows,
                        layout.block_bytes()
                    ),
                    path,
                    doing,
                ));
            }
            return Ok(BlockFile { file, path: path.to_path_buf(), data_start: 0 });
        }
        let head = read_head(&file, len, path, &Limits::DEFAULT)?;
        let data_start = layout.check_block(&head).map_err(|e| Error::format(e, path, doing))?;
        Ok(BlockFile { file, path: path.to_path_buf(), data_start })
    }

    /// Creates a new, empty block file (sparse: its rows read as zeros).
    pub(crate) fn create(path: &Path, layout: &RowLayout, header: &[u8]) -> Result<BlockFile> {
        let doing = "cannot create block file";
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(e, path, doing))?;
        let block = BlockFile { file, path: path.to_path_buf(), data_start: header.len() as u64 };
        let made = write_all_at(&block.file, header, 0)
            .and_then(|()| block.file.set_len(block.data_start + layout.block_bytes()));
        if let Err(e) = made {
            let _ = std::fs::remove_file(path);
            return Err(Error::io(e, path, doing));
        }
        Ok(block)
    }

    /// Reads rows from `first` into `out` (whole rows).
    pub(crate) fn read(&self, layout: &RowLayout, first: u64, out: &mut [u8]) -> Result<()> {
        let at = self.data_start + first * layout.row_bytes();
        if out.len() >= 16 << 20 {
            return crate::file::reader::read_parallel(&self.file, out, at)
                .map_err(|e| Error::io(e, &self.path, "cannot read"));
        }
        read_exact_at(&self.file, out, at).map_err(|e| Error::io(e, &self.path, "cannot read"))
    }

    /// Writes rows from `first`, handed to the disk by `writeback`.
    pub(crate) fn write(&self, layout: &RowLayout, first: u64, rows: &[u8], writeback: &mut Writeback) -> Result<()> {
        let at = self.data_start + first * layout.row_bytes();
        writeback.write_at(&self.file, rows, at).map_err(|e| Error::io(e, &self.path, "cannot write"))
    }

    /// Copies the first `rows` rows of `from` into this (new) block, in the
    /// kernel where it can (`copy_file_range`: no copy through user space,
    /// and a reflink on filesystems that share extents).
    pub(crate) fn copy_rows_from(&self, from: &BlockFile, layout: &RowLayout, rows: u64) -> Result<()> {
        let len = rows * layout.row_bytes();
        copy_range(&from.file, from.data_start, &self.file, self.data_start, len)
            .map_err(|e| Error::io(e, &self.path, "cannot copy rows into"))
    }

    /// Makes the written rows durable.
    pub(crate) fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(e, &self.path, "cannot sync"))
    }
}

/// Opens without following a symbolic link at the last component: a block
/// file is a file of the collection's directory, never a way out of it.
/// Opens a block file (never through a symbolic link), unchecked.
pub(crate) fn open_file(path: &Path, writable: bool) -> std::io::Result<File> {
    no_follow(OpenOptions::new().read(true).write(writable)).open(path)
}

fn no_follow(options: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32);
    }
    options
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

fn copy_range(from: &File, mut src: u64, to: &File, mut dst: u64, mut len: u64) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    while len > 0 {
        let want = len.min(1 << 30) as usize;
        match rustix::fs::copy_file_range(from, Some(&mut src), to, Some(&mut dst), want) {
            Ok(0) => break,
            Ok(n) => len -= n as u64,
            // Across filesystems or where unsupported: copy through a buffer.
            Err(_) => break,
        }
    }
    let mut buf = vec![0u8; (len.min(1 << 20)) as usize];
    while len > 0 {
        let n = len.min(buf.len() as u64) as usize;
        read_exact_at(from, &mut buf[..n], src)?;
        write_all_at(to, &buf[..n], dst)?;
        src += n as u64;
        dst += n as u64;
        len -= n as u64;
    }
    Ok(())
}
