//! The buffer protocol, both ways: [`Buffer`] borrows what a Python object
//! exports (the writers' numpy arrays, bytes, ...), and [`fill_view`] /
//! [`release_view`] export the byte buffers this module hands out
//! (`Region`, `Arena`).

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::raw::c_int;

use pyo3::ffi;
use pyo3::prelude::*;

/// A buffer exported by a Python object, released on drop.
pub(crate) struct Buffer(Box<ffi::Py_buffer>);

impl Buffer {
    /// The object's buffer with shape, strides and format, if it has one.
    pub(crate) fn get(obj: &Bound<'_, PyAny>) -> Option<Buffer> {
        let mut view = Box::new(MaybeUninit::<ffi::Py_buffer>::uninit());
        // SAFETY: `view` is valid for writes; on success the exporter filled
        // it in, and `Drop` releases it exactly once.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), ffi::PyBUF_RECORDS_RO) };
        if rc != 0 {
            // Not an exporter (or not of this kind): the fallback decides.
            let _ = PyErr::take(obj.py());
            return None;
        }
        // SAFETY: initialised by the successful call above.
        Some(Buffer(unsafe { Box::from_raw(Box::into_raw(view).cast::<ffi::Py_buffer>()) }))
    }

    pub(crate) fn is_c_contiguous(&self) -> bool {
        // SAFETY: a valid, exported view.
        unsafe { ffi::PyBuffer_IsContiguous(&*self.0, b'C' as std::os::raw::c_char) != 0 }
    }

    /// The struct-module format without its byte-order prefix, if it is
    /// little-endian or native (we only build for little-endian targets).
    pub(crate) fn format(&self) -> Option<&CStr> {
        if self.0.format.is_null() {
            return Some(c"B");
        }
        // SAFETY: a NUL-terminated string owned by the exporter for the
        // view's lifetime.
        let f = unsafe { CStr::from_ptr(self.0.format) }.to_bytes_with_nul();
        let f = match f.first() {
            Some(b'<' | b'=' | b'@') => f.get(1..)?,
            Some(b'>' | b'!') => return None,
            _ => f,
        };
        CStr::from_bytes_with_nul(f).ok()
    }

    pub(crate) fn shape(&self) -> Vec<u64> {
        let ndim = usize::try_from(self.0.ndim).unwrap_or(0);
        if self.0.shape.is_null() || ndim == 0 {
            return Vec::new();
        }
        // SAFETY: the exporter provides `ndim` dimensions.
        unsafe { std::slice::from_raw_parts(self.0.shape, ndim) }.iter().map(|&d| d as u64).collect()
    }

    /// The size of one item, if the exporter gave a sensible one.
    pub(crate) fn itemsize(&self) -> Option<usize> {
        usize::try_from(self.0.itemsize).ok()
    }

    pub(crate) fn bytes(&self) -> (*const u8, usize) {
        (self.0.buf as *const u8, usize::try_from(self.0.len).unwrap_or(0))
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Buffers are made and dropped with the GIL held (`Tensors` is
        // `unsendable`, and `with_tensors` drops them after the write).
        // SAFETY: exported once by `get`, released once here.
        unsafe { ffi::PyBuffer_Release(&mut *self.0) }
    }
}

/// Fills a one-dimensional byte `Py_buffer` over `len` bytes at `ptr`.
///
/// # Safety
/// `view` must be a valid `Py_buffer` to fill, and the memory must stay
/// valid while `owner` is alive (the view holds a reference to it).
pub(crate) unsafe fn fill_view(
    view: *mut pyo3::ffi::Py_buffer,
    flags: c_int,
    owner: Bound<'_, PyAny>,
    ptr: usize,
    len: usize,
    readonly: bool,
) {
    // SAFETY: per the function's contract.
    unsafe {
        (*view).obj = owner.into_ptr();
        (*view).buf = ptr as *mut std::os::raw::c_void;
        (*view).len = len as isize;
        (*view).readonly = c_int::from(readonly);
        (*view).itemsize = 1;
        (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
            CString::new("B").map_or(std::ptr::null_mut(), CString::into_raw)
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND { &mut (*view).len } else { std::ptr::null_mut() };
        (*view).strides =
            if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES { &mut (*view).itemsize } else { std::ptr::null_mut() };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
}

/// Frees what `fill_view` allocated.
///
/// # Safety
/// `view` must have been filled by `fill_view`.
pub(crate) unsafe fn release_view(view: *mut pyo3::ffi::Py_buffer) {
    // SAFETY: `format` was made by CString::into_raw in fill_view, or is null.
    unsafe {
        if !(*view).format.is_null() {
            drop(CString::from_raw((*view).format));
        }
    }
}
