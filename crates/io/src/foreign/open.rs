//! Files of other kinds that readers take as they take ours: a torch
//! checkpoint or a numpy `.npy`/`.npz`, each opened as the safetensors file
//! it converts to (`converted.rs`). Above `torch_checkpoint` and
//! `numpy_file`, which sit above `converted`.

use std::path::Path;

use crate::error::Result;
use crate::file::reader::Reader;
use crate::options::ReadOptions;

/// Opens the local file at `path`, which our formats refused, as the
/// safetensors file it converts to if it is a torch checkpoint or a numpy
/// `.npy`/`.npz`: `None` if it is neither.
pub fn open_converted_file(path: &Path, options: ReadOptions) -> Option<Result<Reader>> {
    if crate::is_torch_checkpoint(path) {
        Some(crate::open_torch_checkpoint(path, options))
    } else if crate::is_numpy_file(path) {
        Some(crate::open_numpy_file(path, options))
    } else {
        None
    }
}

/// What the file at `path` is, for people (format's `Head::describe` of its
/// first bytes): "a deathtensors file", "a safetensors file", "a Python
/// pickle ...", or "a directory"; "a file that cannot be read" when it
/// cannot be.
pub fn describe_file(path: &Path) -> &'static str {
    use std::io::Read;
    if path.is_dir() {
        return "a directory";
    }
    let mut head = Vec::with_capacity(64);
    match std::fs::File::open(path).and_then(|f| f.take(64).read_to_end(&mut head)) {
        Ok(_) => deathtensors_format::Head::describe(&head),
        Err(_) => "a file that cannot be read",
    }
}
