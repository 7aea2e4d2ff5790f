//! numpy's `.npy` and `.npz` files (docs/PICKLE.md, "numpy files"), read
//! without numpy and without pickle: each array's header parsed by the
//! format crate's `npy` (object arrays refused), its data read only when
//! asked for, column-major arrays turned row-major and big-endian ones
//! swapped, so that each converts, and reads, as a safetensors tensor.
//!
//! An `.npz` is a zip of `.npy` members, stored (`savez`) or deflated
//! (`savez_compressed`). A deflated member is inflated only when read, into
//! at most the bytes its header says the array needs, and its CRC-32 is
//! checked; opening inflates only each member's header.

use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use deathtensors_format::npy::{is_npy, Npy, MAX_HEADER_LEN};
use deathtensors_format::zip::{is_zip, Zip, ZipMember};
use deathtensors_format::{Metadata, TensorSpec};
use miniz_oxide::inflate::{decompress_to_vec_with_limit, TINFLStatus};

use crate::error::{Error, ErrorKind, Result};
use crate::foreign::converted::Container;
use crate::fs::mmap::Mmap;
use crate::options::ReadOptions;

const DOING: &str = "cannot read numpy file";

/// Where an array's bytes are.
#[derive(Debug)]
enum Place {
    /// The data, as it lies in the file (a `.npy`, or a stored member whose
    /// CRC-32 is checked on read).
    Range(Range<u64>, Option<u32>),
    /// A deflated member: inflated on read.
    Deflated(ZipMember),
}

#[derive(Debug)]
struct Array {
    name: String,
    npy: Npy,
    place: Place,
}

/// A numpy `.npy` (one array, named after the file's stem) or `.npz` (one
/// array a member, named after the member without `.npy`), open.
#[derive(Debug)]
pub struct NumpyFile {
    path: PathBuf,
    map: Mmap,
    arrays: Vec<Array>,
}

fn damaged(message: String, path: &Path) -> Error {
    Error::checkpoint(message, path, DOING)
}

fn invalid(e: deathtensors_format::Error, path: &Path) -> Error {
    Error::format(e, path, DOING)
}

/// Whether the local file at `path` is a numpy `.npy` (its magic) or an
/// `.npz` (a zip whose name ends `.npz`: torch checkpoints are zips too).
pub fn is_numpy_file(path: impl AsRef<Path>) -> bool {
    use std::io::Read;
    let path = path.as_ref();
    let mut head = [0u8; 6];
    let Ok(n) = File::open(path).and_then(|f| f.take(6).read(&mut head)) else {
        return false;
    };
    let head = &head[..n];
    is_npy(head) || (is_zip(head) && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("npz")))
}

impl NumpyFile {
    /// Opens the `.npy` or `.npz` at `path`: every array's header read and
    /// checked, none of their data.
    ///
    /// # Errors
    /// `Io`; `Format` (`InvalidNumpy`, `InvalidZip`) naming what is
    /// refused; `InvalidCheckpoint` for data that is not all there, a
    /// member that is not an array, two arrays of one name.
    pub fn open(path: impl AsRef<Path>) -> Result<NumpyFile> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(e, path, "cannot open"))?;
        // SAFETY: as every mapped read (`Mmap::map`): a file changed under
        // the reader is the caller's to avoid (docs/PLATFORMS.md).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(e, path, "cannot open"))?;
        map.advise_random();
        let bytes = map.bytes();
        let arrays = if is_npy(bytes) {
            let npy = Npy::parse(bytes).map_err(|e| invalid(e, path))?;
            let end = npy.data_start.checked_add(npy.data_len).filter(|&e| e == bytes.len() as u64);
            let Some(end) = end else {
                let have = (bytes.len() as u64).saturating_sub(npy.data_start);
                return Err(damaged(
                    format!("the array needs {} bytes of data, the file holds {have}", npy.data_len),
                    path,
                ));
            };
            let name = path.file_stem().map_or_else(|| "array".into(), |s| s.to_string_lossy().into_owned());
            vec![Array { name, place: Place::Range(npy.data_start..end, None), npy }]
        } else if is_zip(bytes) {
            npz_arrays(bytes, path)?
        } else {
            return Err(damaged("neither a .npy file nor an .npz archive".into(), path));
        };
        Ok(NumpyFile { path: path.to_path_buf(), map, arrays })
    }

    /// `(name, dtype, shape)` of each array, in the file's order.
    pub fn arrays(&self) -> impl Iterator<Item = (&str, deathtensors_format::Dtype, &[u64])> {
        self.arrays.iter().map(|a| (a.name.as_str(), a.npy.dtype, a.npy.shape.as_slice()))
    }

    /// The bytes of array `name`, row-major and little-endian: borrowed
    /// from the file where they lie that way already, else copied out.
    ///
    /// # Errors
    /// `TensorNotFound`; `InvalidCheckpoint` for a CRC-32 that does not
    /// match or a member that does not inflate to its size.
    pub fn read(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let a = self
            .arrays
            .iter()
            .find(|a| a.name == name)
            .ok_or_else(|| Error::new(ErrorKind::TensorNotFound(name.into()), Some(&self.path), DOING))?;
        let bytes = self.map.bytes();
        let data: Cow<'_, [u8]> = match &a.place {
            Place::Range(r, crc) => {
                let data = &bytes[r.start as usize..r.end as usize];
                if let Some(crc) = crc {
                    // A stored member's CRC covers its header and data.
                    let member = &bytes[(r.start - a.npy.data_start) as usize..r.end as usize];
                    if crc32fast::hash(member) != *crc {
                        return Err(damaged(format!("array {name:?} does not match its CRC-32"), &self.path));
                    }
                }
                Cow::Borrowed(data)
            }
            Place::Deflated(m) => {
                let all = inflate(bytes, m, m.size, &self.path)?;
                if crc32fast::hash(&all) != m.crc32 {
                    return Err(damaged(format!("array {name:?} does not match its CRC-32"), &self.path));
                }
                let mut all = all;
                all.drain(..a.npy.data_start as usize);
                Cow::Owned(all)
            }
        };
        let mut data = if a.npy.fortran_order && a.npy.shape.len() > 1 {
            Cow::Owned(row_major(&data, &a.npy.shape, (a.npy.dtype.bits() / 8) as usize))
        } else {
            data
        };
        if a.npy.big_endian {
            data = Cow::Owned(crate::foreign::converted::swapped(data.into_owned(), a.npy.dtype));
        }
        Ok(data)
    }
}

/// The arrays of an `.npz`: each member a `.npy` named `<name>.npy`.
fn npz_arrays(bytes: &[u8], path: &Path) -> Result<Vec<Array>> {
    let zip = Zip::parse_allowing_deflate(bytes).map_err(|e| invalid(e, path))?;
    let mut arrays: Vec<Array> = Vec::with_capacity(zip.members.len());
    for m in &zip.members {
        let Some(name) = m.name.strip_suffix(".npy") else {
            return Err(damaged(format!("member {:?} is not an array (.npy)", m.name), path));
        };
        let head_limit = (12 + MAX_HEADER_LEN as u64).min(m.size);
        let (npy, place) = if m.deflated {
            let head = inflate(bytes, m, head_limit, path)?;
            let npy = Npy::parse(&head).map_err(|e| invalid(e, path))?;
            (npy, Place::Deflated(m.clone()))
        } else {
            let r = Zip::data(bytes, m).map_err(|e| invalid(e, path))?;
            let member = &bytes[r.start as usize..r.end as usize];
            let npy = Npy::parse(member).map_err(|e| invalid(e, path))?;
            let data = r.start + npy.data_start.min(m.size)..r.end;
            (npy, Place::Range(data, Some(m.crc32)))
        };
        if npy.data_start.checked_add(npy.data_len) != Some(m.size) {
            return Err(damaged(
                format!(
                    "member {:?}: the array needs {} bytes after its {}-byte header, the member holds {}",
                    m.name, npy.data_len, npy.data_start, m.size
                ),
                path,
            ));
        }
        if arrays.iter().any(|a| a.name == name) {
            return Err(damaged(format!("two arrays named {name:?}"), path));
        }
        arrays.push(Array { name: name.to_string(), npy, place });
    }
    Ok(arrays)
}

/// Inflates member `m` into at most `limit` bytes: all of it when `limit`
/// is its size (which must then be exactly what comes out), else its
/// first `limit` bytes.
fn inflate(bytes: &[u8], m: &ZipMember, limit: u64, path: &Path) -> Result<Vec<u8>> {
    let r = Zip::data(bytes, m).map_err(|e| invalid(e, path))?;
    let stored = &bytes[r.start as usize..r.end as usize];
    let limit = usize::try_from(limit).map_err(|_| damaged(format!("member {:?} is too large", m.name), path))?;
    match decompress_to_vec_with_limit(stored, limit) {
        Ok(out) if limit == m.size as usize && out.len() != limit => Err(damaged(
            format!("member {:?} inflates to {} bytes, its directory says {}", m.name, out.len(), m.size),
            path,
        )),
        Ok(out) => Ok(out),
        Err(e) if e.status == TINFLStatus::HasMoreOutput && limit < m.size as usize => Ok(e.output),
        Err(e) if e.status == TINFLStatus::HasMoreOutput => Err(damaged(
            format!("member {:?} inflates to more than the {} bytes its directory says", m.name, m.size),
            path,
        )),
        Err(e) => Err(damaged(format!("member {:?} does not inflate: {:?}", m.name, e.status), path)),
    }
}

/// The elements of a column-major array of `shape`, each `size` bytes,
/// in row-major order.
fn row_major(data: &[u8], shape: &[u64], size: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = dims.iter().product();
    let mut out = Vec::with_capacity(n * size);
    // Column-major strides, in elements.
    let mut strides = vec![1usize; dims.len()];
    for k in 1..dims.len() {
        strides[k] = strides[k - 1] * dims[k - 1];
    }
    let mut index = vec![0usize; dims.len()];
    for _ in 0..n {
        let at: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&data[at * size..(at + 1) * size]);
        // The next index in row-major order: the last dimension fastest.
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

/// Each array a tensor of the same name; no metadata.
impl Container for NumpyFile {
    fn specs(&self) -> Vec<TensorSpec> {
        self.arrays().map(|(n, d, s)| TensorSpec::new(n, d, s.to_vec())).collect()
    }

    fn conversion_metadata(&self) -> Result<Metadata> {
        Ok(Metadata::new())
    }

    fn tensor(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        self.read(name)
    }

    fn doing(&self) -> &'static str {
        DOING
    }
}

/// Opens the `.npy` or `.npz` at `path` as a [`Reader`](crate::Reader) of
/// the safetensors file it converts to.
///
/// # Errors
/// As [`NumpyFile::open`] and [`crate::open_converted`].
pub fn open_numpy_file(path: impl AsRef<Path>, options: ReadOptions) -> Result<crate::Reader> {
    let path = path.as_ref();
    crate::foreign::converted::open_converted(NumpyFile::open(path)?, path, options)
}

/// Converts the `.npy` or `.npz` at `input` to `output` as `options` say.
///
/// # Errors
/// As [`NumpyFile::open`] and [`NumpyFile::read`], and the writer's.
pub fn convert_numpy_file(
    input: &Path,
    output: &Path,
    options: &crate::WriteOptions,
) -> Result<deathtensors_format::Header> {
    crate::foreign::converted::convert(&NumpyFile::open(input)?, input, output, options)
}
