//! The in-memory part of a table of fixed-width integer rows that spills to a file: [`RowBuffer`].
//!
//! A run appends a row per client step and per finished request (Python's `SpillRows`, in
//! `hub/sim/spill.py`, which owns the temporary file); packing each row here costs a fraction of
//! `struct.pack` into a `bytearray` from a Python method. The rows are little-endian and unpadded,
//! as numpy's structured dtype of the table reads them back.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

/// Rows packed as they are appended, handed to `spill` (as bytes) each time `capacity` bytes are held.
///
/// Args:
///     widths: each column's bytes (8, 4 or 1: signed integers).
///     capacity: bytes held before they are spilled.
///     spill: called with the held rows' bytes when they reach `capacity`.
///     held: rows to start with (packed, as `held` gives them; a table unpickled), never spilled.
#[pyclass(module = "cosim_core")]
pub struct RowBuffer {
    widths: Vec<usize>,
    bytes: Vec<u8>,
    capacity: usize,
    spill: Py<PyAny>,
    rows: usize,
}

#[pymethods]
impl RowBuffer {
    #[new]
    #[pyo3(signature = (widths, capacity, spill, held = Vec::new()))]
    fn new(widths: Vec<usize>, capacity: usize, spill: Py<PyAny>, held: Vec<u8>) -> PyResult<Self> {
        if let Some(width) = widths.iter().find(|w| ![1, 4, 8].contains(*w)) {
            return Err(PyValueError::new_err(format!("no integer column of {width} bytes")));
        }
        let row_bytes: usize = widths.iter().sum();
        let rows = held.len().checked_div(row_bytes).unwrap_or(0);
        if row_bytes == 0 || rows * row_bytes != held.len() {
            return Err(PyValueError::new_err("no columns, or the held bytes are not whole rows"));
        }
        Ok(RowBuffer { widths, bytes: held, capacity, spill, rows })
    }

    /// Adds one row (values in column order), spilling the held rows once they fill the buffer.
    #[pyo3(signature = (*values))]
    fn append(&mut self, py: Python<'_>, values: &Bound<'_, PyTuple>) -> PyResult<()> {
        let values = values.iter().map(|value| value.extract::<i64>()).collect::<PyResult<Vec<i64>>>()?;
        self.push(py, &values)
    }

    /// The rows held (not yet spilled), as bytes.
    fn held<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.bytes)
    }

    /// Drops the rows held and forgets the count.
    fn clear(&mut self) {
        self.bytes = Vec::new();
        self.rows = 0;
    }

    /// Rows appended in all, spilled ones included.
    pub fn __len__(&self) -> usize {
        self.rows
    }
}

impl RowBuffer {
    /// Adds one row (values in column order), as `append` does, from Rust.
    pub fn push(&mut self, py: Python<'_>, values: &[i64]) -> PyResult<()> {
        if values.len() != self.widths.len() {
            return Err(PyValueError::new_err(format!("a row has {} values, not {}", self.widths.len(), values.len())));
        }
        let start = self.bytes.len();
        for (&value, &width) in values.iter().zip(&self.widths) {
            let fits = match width {
                1 => i8::try_from(value).is_ok(),
                4 => i32::try_from(value).is_ok(),
                _ => true,
            };
            if !fits {
                self.bytes.truncate(start); // no part of a bad row stays
                return Err(PyOverflowError::new_err(format!("{value} does not fit in {width} bytes")));
            }
            self.bytes.extend_from_slice(&value.to_le_bytes()[..width]);
        }
        self.rows += 1;
        if self.bytes.len() >= self.capacity {
            self.spill.call1(py, (PyBytes::new(py, &self.bytes),))?;
            self.bytes = Vec::new(); // once written (a failed write keeps them); its memory goes back
        }
        Ok(())
    }
}
