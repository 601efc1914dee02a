//! The default message of a decision (`pipeline.rules.message.default_message`, the
//! specification and the fallback), for the plain case only: every value's text printable ASCII, the
//! observed instant in `datetime.UTC`, each kept leaf a string, an int, a bool, null, a finite
//! float or an object. Anything else — text that `_text` would rewrite or whose cut falls inside
//! a multi-byte character, a leaf that reads "(absent)", another type or zone — is None, and the
//! Python path renders it.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDateTime, PyDict, PyFloat, PyInt, PyString, PyTuple};

/// The rendering's bounds and the absent marker (`MAX_VALUE`, `MAX_MESSAGE`, `ABSENT`).
struct Bounds<'a> {
    max_value: usize,
    absent: &'a str,
}

/// `_text` of a value in the plain case, appended to `out`; `Err(())`: the Python path's.
fn push_text(out: &mut String, value: &Bound<'_, PyAny>, bounds: &Bounds<'_>) -> Result<(), ()> {
    let shown;
    let text: &str = if let Ok(text) = value.downcast_exact::<PyString>() {
        let text = text.to_str().map_err(|_| ())?;
        if !text.bytes().all(|b| (0x20..0x7f).contains(&b)) || text == bounds.absent {
            return Err(()); // rewritten by `_text`, or the marker itself: Python renders it
        }
        text
    } else if value.is_none() {
        "null"
    } else if value.is_exact_instance_of::<PyBool>() {
        if value.is_truthy().map_err(|_| ())? { "true" } else { "false" }
    } else if value.is_exact_instance_of::<PyInt>() {
        shown = value.str().map_err(|_| ())?.to_string(); // json.dumps of an int
        &shown
    } else if let Ok(number) = value.downcast_exact::<PyFloat>() {
        if !number.value().is_finite() {
            return Err(());
        }
        shown = value.repr().map_err(|_| ())?.to_string(); // json.dumps of a finite float
        &shown
    } else {
        return Err(());
    };
    if text.len() > bounds.max_value {
        out.push_str(&text[..bounds.max_value - 1]); // ASCII: characters are bytes
        out.push('…');
    } else {
        out.push_str(text);
    }
    Ok(())
}

/// `default_message` of the named fields and kept `leaves` (`retained`: the allowlist's parsed
/// paths, in order), at most `max_message` characters; None outside the plain case.
#[pyfunction]
#[pyo3(signature = (named, observed_at, leaves, retained, max_value, max_message, absent))]
#[allow(clippy::too_many_arguments)]
pub fn default_message(
    named: [Bound<'_, PyAny>; 5],
    observed_at: &Bound<'_, PyAny>,
    leaves: &Bound<'_, PyAny>,
    retained: &Bound<'_, PyAny>,
    max_value: usize,
    max_message: usize,
    absent: &str,
) -> PyResult<Option<String>> {
    let bounds = Bounds { max_value, absent };
    let (Ok(leaves), Ok(retained)) = (leaves.downcast_exact::<PyDict>(), retained.downcast_exact::<PyTuple>()) else {
        return Ok(None);
    };
    let Ok(instant) = observed_at.downcast_exact::<PyDateTime>() else { return Ok(None) };
    if !crate::avro::in_utc(instant)? {
        return Ok(None);
    }
    let [watcher_id, purpose, outcome, event_type, event_id] = &named;
    if !named.iter().all(|v| v.is_exact_instance_of::<PyString>() || v.is_none()) || [&watcher_id, &purpose, &outcome].iter().any(|v| v.is_none()) {
        return Ok(None); // a field the Python path renders "(absent)", or not text
    }
    let mut out = String::with_capacity(256);
    let mut line = || -> Result<(), ()> {
        push_text(&mut out, watcher_id, &bounds)?;
        out.push_str(": ");
        push_text(&mut out, outcome, &bounds)?;
        out.push_str(" (purpose ");
        push_text(&mut out, purpose, &bounds)?;
        out.push_str(")\n");
        if event_id.is_none() {
            out.push_str("poll");
        } else {
            if event_type.is_none() {
                return Err(()); // rendered "(absent)" by the Python path
            }
            push_text(&mut out, event_type, &bounds)?;
            out.push(' ');
            push_text(&mut out, event_id, &bounds)?;
        }
        Ok(())
    };
    if line().is_err() {
        return Ok(None);
    }
    out.push_str(" observed ");
    out.push_str(&crate::avro::rfc3339(instant, false));
    for path in retained.iter() {
        let Ok(path) = path.downcast_into_exact::<PyTuple>() else { return Ok(None) };
        let mut found = leaves.clone().into_any();
        let mut missing = false;
        for segment in path.iter() {
            let Ok(node) = found.downcast_exact::<PyDict>() else {
                missing = true;
                break;
            };
            match node.get_item(&segment)? {
                Some(value) => found = value,
                None => {
                    missing = true;
                    break;
                }
            }
        }
        if missing || found.is_exact_instance_of::<PyDict>() {
            continue; // absent: no line
        }
        out.push('\n');
        for (n, segment) in path.iter().enumerate() {
            if n > 0 {
                out.push('.');
            }
            let Ok(segment) = segment.downcast_into_exact::<PyString>() else { return Ok(None) };
            let Ok(segment) = segment.to_str() else { return Ok(None) };
            out.push_str(segment);
        }
        out.push_str(": ");
        if push_text(&mut out, &found, &bounds).is_err() {
            return Ok(None);
        }
    }
    let chars = out.chars().count();
    if chars > max_message {
        let cut: String = out.chars().take(max_message - 1).collect();
        return Ok(Some(cut + "…"));
    }
    Ok(Some(out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(default_message, m)?)?;
    Ok(())
}
