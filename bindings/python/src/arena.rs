//! `deathtensors._native.Arena`: one writable buffer holding a whole data
//! blob (or one tensor), that numpy/torch tensors view; it lives while any
//! of them does. Either fresh memory that the blob is read into (one
//! allocation and parallel reads instead of one of each per tensor), or a
//! copy-on-write mapping of the file (no copy at all).

use std::alloc::Layout;
use std::os::raw::c_int;

use pyo3::exceptions::{PyBufferError, PyMemoryError};
use pyo3::prelude::*;

use deathtensors_io::HUGE_PAGE;

/// A writable byte buffer exposed through the buffer protocol.
#[derive(Debug)]
#[pyclass(name = "Arena", module = "deathtensors._native", frozen)]
pub struct PyArena {
    ptr: usize,
    len: usize,
    backing: Backing,
}

#[derive(Debug)]
enum Backing {
    /// Our own allocation, freed on drop.
    Heap(Layout),
    /// A copy-on-write mapping of the file, unmapped on drop.
    Map(#[allow(dead_code)] deathtensors_io::PrivateMap),
}

impl PyArena {
    /// Allocates `len` uninitialised bytes (the caller fills them all).
    pub fn new(len: usize) -> PyResult<PyArena> {
        let align = if len >= HUGE_PAGE { HUGE_PAGE } else { 64 };
        let layout = Layout::from_size_align(len.max(1), align).map_err(|e| PyMemoryError::new_err(e.to_string()))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            return Err(PyMemoryError::new_err(format!("cannot allocate {len} bytes")));
        }
        #[cfg(target_os = "linux")]
        if deathtensors_io::huge_pages_pay(len) {
            // SAFETY: the range is our own fresh allocation; the advice only
            // changes how the kernel backs it. Failure is harmless.
            let _ = unsafe { rustix::mm::madvise(ptr.cast(), layout.size(), rustix::mm::Advice::LinuxHugepage) };
        }
        Ok(PyArena { ptr: ptr as usize, len, backing: Backing::Heap(layout) })
    }

    /// Wraps a copy-on-write mapping: its pages are the file's until
    /// written, and writes stay in this process.
    pub fn from_map(mut map: deathtensors_io::PrivateMap) -> PyArena {
        let slice = map.as_mut_slice();
        let (ptr, len) = (slice.as_mut_ptr() as usize, slice.len());
        PyArena { ptr, len, backing: Backing::Map(map) }
    }

    /// The whole buffer, for filling before it is handed to Python.
    ///
    /// # Safety
    /// No other reference to the buffer may exist (it has not been exported).
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr/size come from one live allocation we own.
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
    }
}

impl Drop for PyArena {
    fn drop(&mut self) {
        if let Backing::Heap(layout) = self.backing {
            // SAFETY: allocated in `new` with this layout, freed once.
            unsafe { std::alloc::dealloc(self.ptr as *mut u8, layout) }
        }
    }
}

#[pymethods]
impl PyArena {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Whether the buffer maps the file (copy-on-write) rather than holding
    /// a copy of it.
    #[getter]
    fn mapped(&self) -> bool {
        matches!(self.backing, Backing::Map(_))
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("view is null"));
        }
        let this = slf.get();
        let (ptr, len) = (this.ptr, this.len);
        // SAFETY: filling a Py_buffer per the protocol; `obj` keeps this
        // arena (and so the memory) alive while the view exists.
        unsafe {
            crate::buffer::fill_view(view, flags, slf.into_any(), ptr, len, false);
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: `view` was filled by `fill_view`.
        unsafe { crate::buffer::release_view(view) }
    }
}
