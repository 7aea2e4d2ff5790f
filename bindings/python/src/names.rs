//! `deathtensors._native.TensorNames`: the tensor names of a large open
//! file as a lazy sequence, read from the native header one name at a time
//! (a list of 10,000,000 Python strings would cost about 600 MB and a
//! second; this costs nothing until used).

use std::sync::Arc;

use deathtensors_io::Reader;
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::pyclass::CompareOp;
use pyo3::types::{PyList, PySlice, PyString};

/// Files with at least this many tensors list their names as a
/// [`PyTensorNames`]; smaller ones as a list (made in well under 10 ms,
/// and what `json.dumps` and deathtensors 0.3.0's callers expect).
pub(crate) const LAZY_NAMES_MIN: usize = 100_000;

/// The names of an open file's tensors in header order: a read-only
/// sequence (`len`, indexing and slicing, iteration, `in` and `index` by
/// hash lookup) that compares equal to the list of the same names. It
/// keeps the file's header alive, not the file open.
#[derive(Debug)]
#[pyclass(name = "TensorNames", module = "deathtensors._native", frozen, sequence)]
pub struct PyTensorNames {
    reader: Arc<Reader>,
}

impl PyTensorNames {
    pub(crate) fn new(reader: Arc<Reader>) -> PyTensorNames {
        PyTensorNames { reader }
    }

    fn name(&self, i: usize) -> &str {
        self.reader.header().tensors().get(i).map_or("", |t| t.name.as_str())
    }

    fn len(&self) -> usize {
        self.reader.header().len()
    }

    /// Whether `other` (a list or a `TensorNames`) holds the same names in
    /// the same order; `None` for anything else.
    fn same_as(&self, other: &Bound<'_, PyAny>) -> PyResult<Option<bool>> {
        if let Ok(other) = other.downcast::<PyTensorNames>() {
            let other = other.get();
            let (a, b) = (self.reader.header().tensors(), other.reader.header().tensors());
            return Ok(Some(a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.name == y.name)));
        }
        let Ok(list) = other.downcast::<PyList>() else {
            return Ok(None);
        };
        if list.len() != self.len() {
            return Ok(Some(false));
        }
        for (i, item) in list.iter().enumerate() {
            match item.downcast::<PyString>() {
                Ok(s) if s.to_cow()? == self.name(i) => {}
                _ => return Ok(Some(false)),
            }
        }
        Ok(Some(true))
    }
}

#[pymethods]
impl PyTensorNames {
    fn __len__(&self) -> usize {
        self.len()
    }

    /// The name at `index` (negative counts from the end), or a list of
    /// the names of a slice.
    fn __getitem__<'py>(&self, py: Python<'py>, index: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(slice) = index.downcast::<PySlice>() {
            let s = slice.indices(self.len() as isize)?;
            let names = (0..s.slicelength).map(|k| self.name((s.start + k as isize * s.step) as usize));
            return Ok(PyList::new(py, names)?.into_any());
        }
        let i: isize = index.extract()?;
        let n = self.len() as isize;
        let at = if i < 0 { i + n } else { i };
        if at < 0 || at >= n {
            return Err(PyIndexError::new_err("tensor name index out of range"));
        }
        Ok(PyString::new(py, self.name(at as usize)).into_any())
    }

    /// Whether a tensor has this name: one hash lookup.
    fn __contains__(&self, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(match name.downcast::<PyString>() {
            Ok(s) => self.reader.header().position(&s.to_cow()?).is_some(),
            Err(_) => false,
        })
    }

    /// The position of `name`, if within `[start, stop)` (as for a list):
    /// one hash lookup (names are unique).
    #[pyo3(signature = (name, start = 0, stop = None))]
    fn index(&self, name: &Bound<'_, PyAny>, start: isize, stop: Option<isize>) -> PyResult<usize> {
        let n = self.len() as isize;
        let clamp = |i: isize| if i < 0 { (i + n).max(0) } else { i.min(n) } as usize;
        let (start, stop) = (clamp(start), clamp(stop.unwrap_or(n)));
        let found = match name.downcast::<PyString>() {
            Ok(s) => self.reader.header().position(&s.to_cow()?),
            Err(_) => None,
        };
        match found.filter(|i| (start..stop).contains(i)) {
            Some(i) => Ok(i),
            None => Err(PyValueError::new_err(format!("{} is not in the tensor names", name.repr()?))),
        }
    }

    /// 1 if a tensor has this name, else 0 (names are unique).
    fn count(&self, name: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(usize::from(self.__contains__(name)?))
    }

    fn __iter__(&self) -> TensorNamesIter {
        TensorNamesIter { reader: self.reader.clone(), next: 0, step_back: false }
    }

    fn __reversed__(&self) -> TensorNamesIter {
        TensorNamesIter { reader: self.reader.clone(), next: self.len(), step_back: true }
    }

    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        let answer = match op {
            CompareOp::Eq => self.same_as(other)?,
            CompareOp::Ne => self.same_as(other)?.map(|same| !same),
            _ => None,
        };
        Ok(match answer {
            Some(answer) => answer.into_pyobject(py)?.to_owned().into_any().unbind(),
            None => py.NotImplemented(),
        })
    }

    /// `names + list`: a list, as for a list.
    fn __add__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let mine = PyList::new(py, (0..self.len()).map(|i| self.name(i)))?;
        mine.call_method1("__add__", (other,))
    }

    /// `list + names`: a list.
    fn __radd__<'py>(&self, py: Python<'py>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let mine = PyList::new(py, (0..self.len()).map(|i| self.name(i)))?;
        other.call_method1("__add__", (mine,))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mine = PyList::new(py, (0..self.len()).map(|i| self.name(i)))?;
        Ok(mine.repr()?.to_string())
    }
}

/// An iterator over a [`PyTensorNames`], forwards or backwards.
#[derive(Debug)]
#[pyclass(module = "deathtensors._native")]
pub struct TensorNamesIter {
    reader: Arc<Reader>,
    /// Forwards: the next position; backwards: one past it.
    next: usize,
    step_back: bool,
}

#[pymethods]
impl TensorNamesIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(mut slf: PyRefMut<'py, Self>, py: Python<'py>) -> Option<Bound<'py, PyString>> {
        let i = if slf.step_back {
            slf.next = slf.next.checked_sub(1)?;
            slf.next
        } else {
            slf.next += 1;
            slf.next - 1
        };
        let name = slf.reader.header().tensors().get(i)?.name.as_str();
        Some(PyString::new(py, name))
    }

    /// How many names are left (`operator.length_hint`).
    fn __length_hint__(&self) -> usize {
        if self.step_back {
            self.next
        } else {
            self.reader.header().len().saturating_sub(self.next)
        }
    }
}
