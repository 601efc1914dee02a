//! Length-prefixed fields and delivery key v1 (`pipeline.rules.keys`, DESIGN.md §8).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use sha2::{Digest, Sha256};

const HEX: &[u8; 16] = b"0123456789abcdef";

pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Appends each field as its 4-byte big-endian length and UTF-8 bytes; None when a field is
/// not exactly a `str` or does not encode (the Python path names the refusal).
pub fn push_fields(out: &mut Vec<u8>, fields: &Bound<'_, PyAny>) -> PyResult<Option<()>> {
    for item in fields.try_iter()? {
        let item = item?;
        if !item.is_exact_instance_of::<PyString>() {
            return Ok(None);
        }
        let Ok(text) = item.downcast::<PyString>()?.to_str() else {
            return Ok(None);
        };
        let Ok(size) = u32::try_from(text.len()) else {
            return Ok(None);
        };
        out.extend_from_slice(&size.to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    Ok(Some(()))
}

/// `encode_fields` of a sequence of strings, or None outside the plain subset.
#[pyfunction]
fn encode_fields<'py>(py: Python<'py>, fields: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut out = Vec::new();
    Ok(push_fields(&mut out, fields)?.map(|()| PyBytes::new(py, &out)))
}

/// `delivery_key_from(prefix, trigger)`: hex SHA-256 of the watcher version's encoded prefix
/// and the trigger's fields (kind first), or None outside the plain subset.
#[pyfunction]
fn delivery_key_from(prefix: &[u8], trigger_fields: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let mut out = Vec::with_capacity(prefix.len() + 96);
    out.extend_from_slice(prefix);
    Ok(push_fields(&mut out, trigger_fields)?.map(|()| sha256_hex(&out)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_fields, m)?)?;
    m.add_function(wrap_pyfunction!(delivery_key_from, m)?)?;
    Ok(())
}
