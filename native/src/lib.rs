//! vigil's compiled hot path (DESIGN.md §10 "Compiled hot path"): the pure-data pieces of one
//! evaluation — condition, delivery key, evidence digest, partition, Avro records, AES-GCM
//! sealing — written to give exactly the Python rules' bytes and answers.
//!
//! The Python rules are the specification and the fallback: wherever this module meets a value
//! outside the plain subset it handles, it says so (`None`, or an exception the caller turns
//! into the Python path), and the Python code decides. It never decides a refusal of its own.

use pyo3::prelude::*;

mod avro;
mod condition;
mod decide;
mod event;
mod fused;
mod jcs;
mod json;
mod keys;
mod message;
mod murmur;
mod seal;

#[pymodule]
fn vigil_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    murmur::register(m)?;
    keys::register(m)?;
    message::register(m)?;
    jcs::register(m)?;
    json::register(m)?;
    condition::register(m)?;
    decide::register(m)?;
    event::register(m)?;
    avro::register(m)?;
    seal::register(m)?;
    fused::register(m)?;
    Ok(())
}
