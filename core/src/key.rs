//! Keys of the block pool: a cached block's content hash, or an integer id.
//!
//! With prefix caching a cached block is known by its SHA-256 chain hash (32 bytes, from
//! [`crate::hasher`]); runs of uncached free blocks, and blocks shared by forks
//! without prefix caching, are known by integer ids the pool hands out.

use std::hash::{Hash, Hasher};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt};

/// Bytes in a content hash (SHA-256).
pub const HASH_BYTES: usize = 32;

/// A block (or run of blocks) as the pool knows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Key {
    /// An id the pool handed out (a run of free blocks, or a block shared by forks).
    Id(i64),
    /// A full block's content hash.
    Hash([u8; HASH_BYTES]),
}

impl Key {
    /// 64 well-mixed bits: a content hash is uniform already; an id is spread by Fibonacci hashing.
    #[inline]
    pub fn fingerprint(&self) -> u64 {
        match self {
            Key::Id(id) => (*id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            Key::Hash(bytes) => {
                let mut first = [0u8; 8];
                first.copy_from_slice(&bytes[..8]);
                u64::from_le_bytes(first)
            }
        }
    }

    /// The key of a Python object: `bytes` of 32 (a content hash) or an `int` (an id).
    pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Key> {
        if let Ok(bytes) = obj.downcast::<PyBytes>() {
            let data: [u8; HASH_BYTES] = bytes.as_bytes().try_into().map_err(|_| {
                PyTypeError::new_err(format!("a block hash is {HASH_BYTES} bytes, not {}", bytes.as_bytes().len()))
            })?;
            return Ok(Key::Hash(data));
        }
        if obj.is_instance_of::<PyInt>() {
            return Ok(Key::Id(obj.extract()?));
        }
        Err(PyTypeError::new_err(format!("a block key is bytes or int, not {}", obj.get_type().name()?)))
    }

    /// The Python object of this key (`int` or `bytes`).
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Key::Id(id) => id.into_pyobject(py)?.into_any(),
            Key::Hash(bytes) => PyBytes::new(py, bytes).into_any(),
        })
    }
}

impl Hash for Key {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.fingerprint());
    }
}
