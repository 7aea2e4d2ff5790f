//! Files of other kinds that readers take as they take ours: a torch
//! checkpoint or a numpy `.npy`/`.npz`, each opened as the safetensors file
//! it converts to (`converted.rs`). Above `torch_checkpoint` and
//! `numpy_file`, which sit above `converted`.

use std::path::Path;

use crate::error::Result;
use crate::options::ReadOptions;
use crate::reader::Reader;

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
