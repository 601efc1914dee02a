//! An `event` record's decoded value as evidence (`pipeline.records.event.evidence_from_event`,
//! the specification and the fallback): its text fields within their byte bounds, its
//! `observed_at` in UTC within the years 1970..9999, its payload a JSON object read by
//! `json::read`, all set into a fresh `SharedEvidence` through the slot setters Python hands over.
//! A value outside that plain case — a field of another type, empty or over its bound, an instant
//! held in another zone or out of range, a payload the native reader leaves — gets None, and the
//! Python path builds the evidence or names the refusal.

use pyo3::prelude::*;
use pyo3::intern;
use pyo3::types::{PyDateAccess, PyDateTime, PyDict, PyString, PyTuple};

use crate::json;

/// A text field (`_field`): an exact, non-empty `str` of at most `limit` UTF-8 bytes; None when
/// absent or null and `optional`; `Err(())` for anything the Python path must judge.
fn text<'py>(value: &Bound<'py, PyDict>, name: &Bound<'py, PyString>, limit: usize, optional: bool) -> Result<Bound<'py, PyAny>, ()> {
    let py = value.py();
    let found = value.get_item(name).map_err(|_| ())?;
    let found = match found {
        Some(found) if !found.is_none() => found,
        _ if optional => return Ok(py.None().into_bound(py)),
        _ => return Err(()),
    };
    let exact = found.downcast_exact::<PyString>().map_err(|_| ())?;
    let bytes = exact.to_str().map_err(|_| ())?.len(); // a lone surrogate: the Python path's
    if bytes == 0 || bytes > limit {
        return Err(());
    }
    Ok(found)
}

/// The evidence of a decoded `event` value, or None (the Python path's). `new` makes an empty
/// `SharedEvidence`; `setters` are its slots' setters in `_EVENT_SLOTS` order; `limits`: the id
/// and cursor byte bounds, the payload's size bound, and the JSON depth and node bounds.
#[pyfunction]
fn event_evidence<'py>(
    value: &Bound<'py, PyAny>,
    position: &Bound<'py, PyAny>,
    new: &Bound<'py, PyAny>,
    setters: &Bound<'py, PyTuple>,
    kind: &Bound<'py, PyAny>,
    limits: (usize, usize, usize, usize, usize),
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = value.py();
    let (id_bytes, cursor_bytes, payload_bytes, max_depth, max_nodes) = limits;
    let Ok(value) = value.downcast_exact::<PyDict>() else { return Ok(None) };
    let fields = (|| -> Result<[Bound<'py, PyAny>; 5], ()> {
        Ok([
            text(value, intern!(py, "source_id"), id_bytes, false)?,
            text(value, intern!(py, "event_type"), id_bytes, false)?,
            text(value, intern!(py, "event_id"), id_bytes, false)?,
            text(value, intern!(py, "envelope_id"), id_bytes, true)?,
            text(value, intern!(py, "cursor"), cursor_bytes, true)?,
        ])
    })();
    let Ok([source_id, event_type, event_id, envelope_id, cursor]) = fields else { return Ok(None) };
    let Some(observed_at) = value.get_item(intern!(py, "observed_at"))? else { return Ok(None) };
    let Ok(instant) = observed_at.downcast_exact::<PyDateTime>() else { return Ok(None) };
    if !crate::avro::in_utc(instant)? || !(1970..=9999).contains(&instant.get_year()) {
        return Ok(None); // another zone, or out of range: converted or refused in Python
    }
    let payload = match value.get_item(intern!(py, "payload"))? {
        None => return Ok(None),
        Some(raw) if raw.is_none() => PyDict::new(py).into_any(),
        Some(raw) => {
            let Ok(raw) = raw.downcast_exact::<PyString>() else { return Ok(None) };
            if raw.len()? > payload_bytes {
                return Ok(None);
            }
            let Ok(text) = raw.to_str() else { return Ok(None) };
            match json::read(py, text, max_depth, max_nodes) {
                Some(read) if read.is_exact_instance_of::<PyDict>() => read,
                _ => return Ok(None),
            }
        }
    };
    let none = || py.None().into_bound(py);
    let values = [
        kind.clone(),
        source_id,
        observed_at,
        event_type,
        event_id,
        envelope_id,
        cursor,
        payload,
        position.clone(),
        none(), // scheduled_at
        none(), // watcher_key
        none(), // tool_error
        false.into_pyobject(py)?.to_owned().into_any(),
        0i64.into_pyobject(py)?.into_any(), // tokens
        0i64.into_pyobject(py)?.into_any(), // micro_usd
        none(), // _digest
    ];
    if setters.len() != values.len() {
        return Ok(None);
    }
    let evidence = new.call0()?;
    for (setter, slot_value) in setters.iter().zip(values) {
        setter.call1((&evidence, slot_value))?;
    }
    Ok(Some(evidence))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(event_evidence, m)?)?;
    Ok(())
}
