//! RFC 8785 (JCS) canonical JSON of Python values and evidence digest v1
//! (`pipeline.rules.keys.canonical_json`, `evidence_digest_of`).
//!
//! Writes exact `str`, `int` within ±(2^53 - 1), finite `float` (ECMAScript number form),
//! `bool`, `None`, `list`, `tuple` and `dict` with `str` keys (sorted by UTF-16 code units),
//! nested at most `MAX_DEPTH`. Anything else — a lone surrogate, a big integer, NaN, another
//! type, deeper nesting — is not written here: the caller gets None and the Python path (the
//! `rfc8785` library) writes it or names the refusal.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDateTime, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::keys::sha256_hex;

const MAX_DEPTH: usize = 200;
const SAFE_INT: i64 = (1 << 53) - 1;

pub fn quote(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    if bytes.iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.extend_from_slice(bytes); // nothing to escape: the common case, copied whole
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// ECMAScript's Number::toString for a finite float (RFC 8785 §3.2.2.3); -0 is "0".
pub fn number(out: &mut Vec<u8>, value: f64) {
    if value == 0.0 {
        out.push(b'0');
        return;
    }
    let mut buffer = ryu_js::Buffer::new();
    out.extend_from_slice(buffer.format_finite(value).as_bytes());
}

fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    let astral = |s: &str| s.as_bytes().iter().any(|&c| c >= 0xF0);
    if !astral(a) && !astral(b) {
        return a.as_bytes().cmp(b.as_bytes()); // BMP only: UTF-8 order is UTF-16 order
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Appends the canonical JSON of `value`; false when it is outside the subset written here.
pub fn write(out: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if let Ok(text) = value.downcast_exact::<PyString>() {
        let Ok(text) = text.to_str() else { return Ok(false) };
        quote(out, text);
        return Ok(true);
    }
    if value.is_none() {
        out.extend_from_slice(b"null");
        return Ok(true);
    }
    if let Ok(flag) = value.downcast_exact::<PyBool>() {
        out.extend_from_slice(if flag.is_true() { b"true" } else { b"false" });
        return Ok(true);
    }
    if value.is_exact_instance_of::<PyInt>() {
        return Ok(match value.extract::<i64>() {
            Ok(n) if (-SAFE_INT..=SAFE_INT).contains(&n) => {
                out.extend_from_slice(itoa(n).as_bytes());
                true
            }
            _ => false,
        });
    }
    if let Ok(float) = value.downcast_exact::<PyFloat>() {
        let f = float.value();
        if !f.is_finite() {
            return Ok(false);
        }
        number(out, f);
        return Ok(true);
    }
    if depth >= MAX_DEPTH {
        return Ok(false);
    }
    if let Ok(object) = value.downcast_exact::<PyDict>() {
        return write_object(out, object, depth);
    }
    if let Ok(list) = value.downcast_exact::<PyList>() {
        return write_items(out, list.iter(), depth);
    }
    if let Ok(tuple) = value.downcast_exact::<PyTuple>() {
        return write_items(out, tuple.iter(), depth);
    }
    Ok(false)
}

fn itoa(n: i64) -> String {
    n.to_string()
}

fn write_items<'py>(
    out: &mut Vec<u8>,
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
) -> PyResult<bool> {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if !write(out, &item, depth + 1)? {
            return Ok(false);
        }
    }
    out.push(b']');
    Ok(true)
}

fn write_object(out: &mut Vec<u8>, object: &Bound<'_, PyDict>, depth: usize) -> PyResult<bool> {
    let mut members: Vec<(Bound<'_, PyString>, Bound<'_, PyAny>)> = Vec::with_capacity(object.len());
    for (key, item) in object.iter() {
        let Ok(key) = key.downcast_exact::<PyString>() else { return Ok(false) };
        members.push((key.clone(), item));
    }
    let mut texts: Vec<(&str, usize)> = Vec::with_capacity(members.len());
    for (i, (key, _)) in members.iter().enumerate() {
        let Ok(text) = key.to_str() else { return Ok(false) };
        texts.push((text, i));
    }
    texts.sort_by(|a, b| utf16_order(a.0, b.0));
    out.push(b'{');
    for (n, (text, i)) in texts.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        quote(out, text);
        out.push(b':');
        if !write(out, &members[*i].1, depth + 1)? {
            return Ok(false);
        }
    }
    out.push(b'}');
    Ok(true)
}

/// RFC 8785 bytes of `value`, or None when the Python path must write (or refuse) it.
#[pyfunction]
fn canonical_json<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let mut out = Vec::with_capacity(64);
    Ok(write(&mut out, value, 0)?.then(|| PyBytes::new(py, &out)))
}

const DIGEST_NAMES: [&str; 9] = [
    "cursor", "envelope_id", "event_id", "event_type", "observed_at", "payload", "scheduled_at",
    "source_id", "source_kind",
];

/// Appends the nine-field evidence object (RFC 8785 key order); false outside the subset.
pub fn write_evidence(out: &mut Vec<u8>, given: [&Bound<'_, PyAny>; 9]) -> PyResult<bool> {
    out.push(b'{');
    for (n, (name, value)) in DIGEST_NAMES.iter().zip(given).enumerate() {
        if n > 0 {
            out.push(b',');
        }
        quote(out, name);
        out.push(b':');
        if !write(out, value, 1)? {
            return Ok(false);
        }
    }
    out.push(b'}');
    Ok(true)
}

/// Evidence digest v1 of the nine fields given one by one (instants as RFC 3339 text), as
/// `pipeline.rules.keys.evidence_digest_of` takes them; None outside the subset.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn evidence_digest_of(
    source_kind: &Bound<'_, PyAny>,
    source_id: &Bound<'_, PyAny>,
    event_type: &Bound<'_, PyAny>,
    event_id: &Bound<'_, PyAny>,
    envelope_id: &Bound<'_, PyAny>,
    cursor: &Bound<'_, PyAny>,
    observed_at: &Bound<'_, PyAny>,
    scheduled_at: &Bound<'_, PyAny>,
    payload: &Bound<'_, PyAny>,
) -> PyResult<Option<String>> {
    let mut out = Vec::with_capacity(256);
    let given = [
        cursor, envelope_id, event_id, event_type, observed_at, payload, scheduled_at, source_id,
        source_kind,
    ];
    Ok(write_evidence(&mut out, given)?.then(|| sha256_hex(&out)))
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` of an instant in `datetime.UTC` (`rfc3339_micros`); None for
/// any other value or zone (the Python path converts it).
fn micros_text<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyString>>> {
    let Ok(instant) = value.downcast_exact::<PyDateTime>() else { return Ok(None) };
    if !crate::avro::in_utc(instant)? {
        return Ok(None);
    }
    let text = crate::avro::rfc3339(instant, true);
    Ok(Some(PyString::new(value.py(), &text)))
}

/// Evidence digest v1 of an evidence object (`Evidence.digest`), its nine fields read from its
/// attributes and its instants written here; None when an instant is not in `datetime.UTC`, the
/// payload is not a plain `dict` or a value is outside the subset (the Python path digests it).
#[pyfunction]
fn evidence_digest<'py>(evidence: &Bound<'py, PyAny>) -> PyResult<Option<String>> {
    let py = evidence.py();
    let get = |name: &Bound<'py, PyString>| evidence.getattr(name);
    let kind = get(intern!(py, "source_kind"))?.getattr(intern!(py, "value"))?;
    let Some(observed_at) = micros_text(&get(intern!(py, "observed_at"))?)? else { return Ok(None) };
    let mut scheduled_at = get(intern!(py, "scheduled_at"))?;
    if !scheduled_at.is_none() {
        let Some(text) = micros_text(&scheduled_at)? else { return Ok(None) };
        scheduled_at = text.into_any();
    }
    let payload = get(intern!(py, "payload"))?;
    if !payload.is_exact_instance_of::<PyDict>() {
        return Ok(None);
    }
    let given = [
        &get(intern!(py, "cursor"))?,
        &get(intern!(py, "envelope_id"))?,
        &get(intern!(py, "event_id"))?,
        &get(intern!(py, "event_type"))?,
        observed_at.as_any(),
        &payload,
        &scheduled_at,
        &get(intern!(py, "source_id"))?,
        &kind,
    ];
    let mut out = Vec::with_capacity(256);
    Ok(write_evidence(&mut out, given)?.then(|| sha256_hex(&out)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(canonical_json, m)?)?;
    m.add_function(wrap_pyfunction!(evidence_digest_of, m)?)?;
    m.add_function(wrap_pyfunction!(evidence_digest, m)?)?;
    Ok(())
}
