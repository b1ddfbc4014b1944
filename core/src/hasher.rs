//! The block hash chain, computed in Python (`cosim.hub.sim.scheduling.block_hash`) for now:
//! the Python side registers its function once at import with [`set_block_hasher`].

use std::sync::Mutex;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

static HASHER: Mutex<Option<Py<PyAny>>> = Mutex::new(None);

/// Registers `block_hashes(seq, num_blocks, block_size) -> list[bytes]`, the hashes of a
/// sequence's first full blocks (a list the sequence keeps and extends).
#[pyfunction]
pub fn set_block_hasher(hasher: Py<PyAny>) {
    *HASHER.lock().expect("the hasher's lock") = Some(hasher);
}

/// The hashes of `seq`'s first `num_blocks` full blocks, from the registered function.
pub fn block_hashes<'py>(seq: &Bound<'py, PyAny>, num_blocks: i64, block_size: i64) -> PyResult<Bound<'py, PyList>> {
    let py = seq.py();
    let hasher = HASHER.lock().expect("the hasher's lock").as_ref().map(|hasher| hasher.clone_ref(py))
        .ok_or_else(|| PyRuntimeError::new_err("no block hasher: cosim_core.set_block_hasher was not called"))?;
    Ok(hasher.bind(py).call1((seq, num_blocks, block_size))?.downcast_into::<PyList>()?)
}
