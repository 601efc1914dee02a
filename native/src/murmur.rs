//! Kafka's murmur2 and the Java default partitioner (`pipeline.kafka.partitioner`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

pub fn murmur2_of(data: &[u8]) -> i32 {
    const M: u32 = 0x5BD1_E995;
    let length = data.len();
    let mut h: u32 = 0x9747_B28C ^ (length as u32);
    let words = length / 4;
    for i in 0..words {
        let mut k = u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let end = words * 4;
    let rest = length & 3;
    if rest == 3 {
        h ^= (data[end + 2] as u32) << 16;
    }
    if rest >= 2 {
        h ^= (data[end + 1] as u32) << 8;
    }
    if rest >= 1 {
        h ^= data[end] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

pub fn partition_of(raw: &[u8], partitions: i64) -> i64 {
    ((murmur2_of(raw) as u32 & 0x7FFF_FFFF) as i64) % partitions
}

/// Kafka's murmur2 of `data` as a signed 32-bit int.
#[pyfunction]
fn murmur2(data: &[u8]) -> i32 {
    murmur2_of(data)
}

/// The partition of `key` (bytes, or text as UTF-8) among `partitions`.
#[pyfunction]
fn partition_for(key: &Bound<'_, PyAny>, partitions: i64) -> PyResult<i64> {
    if partitions <= 0 {
        return Err(PyValueError::new_err("a topic has at least one partition"));
    }
    if let Ok(text) = key.downcast::<PyString>() {
        return Ok(partition_of(text.to_str()?.as_bytes(), partitions));
    }
    let raw = key.downcast::<PyBytes>()?;
    Ok(partition_of(raw.as_bytes(), partitions))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(partition_for, m)?)?;
    Ok(())
}
