//! `deathtensors._native.Arena`: one fresh, writable, page-aligned buffer
//! that a whole data blob is read into, so that loading every tensor costs
//! one allocation and parallel reads instead of one of each per tensor.
//! Tensors are numpy/torch views into it; it lives while any of them does.

use std::alloc::Layout;
use std::os::raw::c_int;

use pyo3::exceptions::{PyBufferError, PyMemoryError};
use pyo3::prelude::*;

/// Buffers at least this large are aligned to and advised for 2 MiB huge
/// pages: fewer page faults when the read first touches them.
const HUGE_PAGE: usize = 2 << 20;

/// An owned, writable byte buffer exposed through the buffer protocol.
#[derive(Debug)]
#[pyclass(name = "Arena", module = "deathtensors._native", frozen)]
pub struct PyArena {
    ptr: usize,
    len: usize,
    layout: Layout,
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
        if len >= HUGE_PAGE {
            // SAFETY: the range is our own fresh allocation; the advice only
            // changes how the kernel backs it. Failure is harmless.
            let _ = unsafe { rustix::mm::madvise(ptr.cast(), layout.size(), rustix::mm::Advice::LinuxHugepage) };
        }
        Ok(PyArena { ptr: ptr as usize, len, layout })
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
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr as *mut u8, self.layout) }
    }
}

#[pymethods]
impl PyArena {
    fn __len__(&self) -> usize {
        self.len
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
            crate::reader::fill_view(view, flags, slf.into_any(), ptr, len, false);
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, view: *mut pyo3::ffi::Py_buffer) {
        // SAFETY: `view` was filled by `fill_view`.
        unsafe { crate::reader::release_view(view) }
    }
}
