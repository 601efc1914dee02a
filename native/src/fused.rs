//! The evaluator's write side in one call per batch (`consumers.evaluator.fused`): for each
//! evaluation, the watcher-state, receipt and outbox entry as `pipeline.records` writes them —
//! field maps, RFC 8785 content, the seal's identity, AES-256-GCM under the cipher the Python key
//! ring hands over, and the Avro bytes.
//!
//! The Python encoders (`encode_state`, `encode_receipt`, `encode_outbox_entry`) are the
//! specification. An evaluation this module does not write the plain way — a value outside the
//! canonical-JSON subset, a field the Avro writer refuses, a cipher that is not native, any error
//! at all — gets None, and the caller writes it on the Python path, whose bytes or exception
//! stand. Nothing here decides a refusal, and no error crosses into Python from here except one
//! the ring's own `cipher_of` raised.

use std::collections::HashMap;
use std::fmt::Write;

use pyo3::exceptions::PyOverflowError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDelta, PyDeltaAccess, PyDict, PyInt, PyList, PyString, PyTuple, PyType};

use crate::avro::{self, Node, Writer};
use crate::jcs;
use crate::seal::{self, Cipher, NONCE};

/// The names this module supplies, per record; a writer's schema must be exactly these.
const RECEIPT: [&str; 22] = [
    "tenant_id", "user_id", "watcher_id", "watcher_version", "source_id", "evaluated_at",
    "outcome", "reason", "evidence_digest", "trigger", "trigger_key", "observed_at", "position",
    "authorized", "authorization", "budget", "tool_error", "payload", "delivery_key", "note",
    "sealed", "retain_until",
];
const STATE: [&str; 17] = [
    "tenant_id", "user_id", "watcher_id", "source_id", "version", "status", "activated_at",
    "checkpoint", "recent_triggers", "last_outcome", "last_reason", "evaluations",
    "closed_reason", "revision", "holds", "notified_at", "updated_at",
];
const OUTBOX: [&str; 27] = [
    "delivery_key", "tenant_id", "user_id", "watcher_id", "watcher_version", "source_id",
    "purpose", "trigger", "outcome", "verb", "target", "text", "args", "evidence_digest",
    "evidence_observed_at", "due_at", "late", "created_at", "retry", "quiet_hours", "budgets",
    "delivery_retention_micros", "wake_session", "session_id", "schedule_name", "schedule_time",
    "sealed",
];

/// A named tuple's fields by position: `$kind::name as usize` is where `name` sits, and
/// `$names` the order the Python class's `_fields` must have (checked once per batch; another
/// order and the whole batch goes the Python path). Read by index, not by attribute name.
macro_rules! layout {
    ($kind:ident, $names:ident, [$($field:ident),* $(,)?]) => {
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Clone, Copy)]
        enum $kind { $($field),* }
        const $names: &[&str] = &[$(stringify!($field)),*];
    };
}

layout!(R, RECEIPT_TUPLE, [
    tenant_id, user_id, watcher_id, watcher_version, evaluated_at, evidence_digest, trigger,
    trigger_key, observed_at, outcome, reason, authorized, position, authorization, budget,
    tool_error, payload, delivery_key, note, erased, retain_until,
]);
layout!(S, STATE_TUPLE, [
    version, status, activated_at, checkpoint, recent_triggers, last_outcome, last_reason,
    evaluations, closed_reason, revision, holds, notified_at,
]);
layout!(C, CHECKPOINT_TUPLE, [trigger_key, trigger, observed_at, position]);
layout!(O, OUTBOX_TUPLE, [
    delivery_key, tenant_id, user_id, watcher_id, watcher_version, source_id, purpose, trigger,
    outcome, verb, target, due_at, created_at, retry, delivery_retention, text, message, args,
    evidence_digest, evidence_observed_at, late, quiet_hours, budgets, wake_session, session_id,
    schedule_name, schedule_time, erased,
]);

/// Whether `class._fields` is exactly `names`.
fn laid_out(class: &Bound<'_, PyType>, names: &[&str]) -> PyResult<bool> {
    let Ok(fields) = class.getattr(intern!(class.py(), "_fields")) else { return Ok(false) };
    let Ok(fields) = fields.downcast_into::<PyTuple>() else { return Ok(false) };
    if fields.len() != names.len() {
        return Ok(false);
    }
    for (field, name) in fields.iter().zip(names) {
        if !field.downcast::<PyString>().is_ok_and(|f| f.to_str().ok() == Some(*name)) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Field `index` of `record`, which must be exactly of `class` (else the Python path).
fn field<'py>(record: &Bound<'py, PyAny>, class: &Bound<'py, PyType>, index: usize) -> Step<Bound<'py, PyAny>> {
    if !record.get_type().is(class) {
        return Err(Fallback);
    }
    Ok(record.downcast::<PyTuple>().map_err(|_| Fallback)?.get_item(index)?)
}

/// A schema's fields in its own order, each with the index of its value in `names`; None
/// when the schema's fields are not exactly `names`.
fn plan<'a>(py: Python<'_>, writer: &'a Writer, names: &[&str]) -> PyResult<Option<Vec<(&'a Node, usize)>>> {
    let Node::Record(fields) = &writer.root else { return Ok(None) };
    if fields.len() != names.len() {
        return Ok(None);
    }
    let mut order = Vec::with_capacity(fields.len());
    for (name, node) in fields {
        let text = name.bind(py).to_str()?;
        match names.iter().position(|n| *n == text) {
            Some(i) => order.push((node, i)),
            None => return Ok(None),
        }
    }
    Ok(Some(order))
}

fn encode(header: &[u8], order: &[(&Node, usize)], values: &[Bound<'_, PyAny>]) -> PyResult<Vec<u8>> {
    let mut out = Vec::with_capacity(header.len() + 384);
    out.extend_from_slice(header);
    for (node, index) in order {
        avro::write(node, &values[*index], &mut out)?;
    }
    Ok(out)
}

/// Why an evaluation is not written here: `Fallback` sends it to the Python path (never
/// shown to Python); `Raise` is an error the key ring raised, which stands as on that path.
enum Stop {
    Fallback,
    Raise(PyErr),
}

use Stop::Fallback;

impl From<PyErr> for Stop {
    fn from(_: PyErr) -> Self {
        Fallback
    }
}

type Step<T> = Result<T, Stop>;

fn canonical(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> Step<()> {
    if jcs::write(out, value, 0)? {
        Ok(())
    } else {
        Err(Fallback)
    }
}

/// The sealed content's last member, the trigger's JSON, and its close (keys in RFC 8785 order).
fn last_trigger(content: &mut Vec<u8>, trigger_text: &[u8]) {
    content.extend_from_slice(b",\"trigger\":");
    content.extend_from_slice(trigger_text);
    content.push(b'}');
}

/// An enum member's value, None as None (`x.value` on the Python path).
fn value_of<'py>(member: Bound<'py, PyAny>) -> Step<Bound<'py, PyAny>> {
    if member.is_none() {
        return Ok(member);
    }
    Ok(member.getattr(intern!(member.py(), "_value_"))?)
}

/// `pipeline.rules.durations.to_micros`, within a long (else the Python path decides).
fn micros(value: &Bound<'_, PyAny>) -> Step<i64> {
    let delta = value.downcast::<PyDelta>().map_err(|_| Fallback)?;
    let whole = (delta.get_days() as i128 * 86_400 + delta.get_seconds() as i128) * 1_000_000
        + delta.get_microseconds() as i128;
    i64::try_from(whole).map_err(|_| Fallback)
}

fn fields(parts: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    for part in parts {
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part.as_bytes());
    }
    out
}

fn text<'a>(value: &'a Bound<'_, PyAny>) -> Step<&'a str> {
    let exact = value.downcast_exact::<PyString>().map_err(|_| Fallback)?;
    Ok(exact.to_str()?)
}

struct Batch<'py, 'a> {
    py: Python<'py>,
    cipher_of: &'a Bound<'py, PyAny>,
    ciphers: PyRefMut<'py, CipherMemo>,
    nonce: Option<[u8; NONCE]>,
    nonces: Vec<u8>, // fresh random nonces for the batch, drawn in one call, used from the end
    memo_key: String,
    far_future: &'a Bound<'py, PyAny>,
    updated_at: &'a Bound<'py, PyAny>,
    receipt: (&'a [u8], Vec<(&'a Node, usize)>),
    state: (&'a [u8], Vec<(&'a Node, usize)>),
    outbox: (&'a [u8], Vec<(&'a Node, usize)>),
    classes: &'a [Bound<'py, PyType>; 4], // Receipt, WatcherState, AppliedTrigger, OutboxEntry
}

impl<'py> Batch<'py, '_> {
    /// The ring's cipher for an owner (None: no key, the record is written withheld), asked
    /// once per owner while the ring is unchanged; an error the ring raises (a KEK not
    /// configured) stands.
    fn cipher(&mut self, tenant: &Bound<'py, PyAny>, user: &Bound<'py, PyAny>, watcher: Option<(&Bound<'py, PyAny>, &Bound<'py, PyAny>)>) -> Step<Option<Py<Cipher>>> {
        let version = match watcher {
            Some((_, v)) => {
                if !v.is_exact_instance_of::<PyInt>() {
                    return Err(Fallback);
                }
                v.extract::<i64>()?
            }
            None => -1,
        };
        // the owner's memo key, written into one reused buffer: no allocation when it is found
        let mut key = std::mem::take(&mut self.memo_key);
        key.clear();
        for part in [text(tenant)?, text(user)?, match watcher {
            Some((w, _)) => text(w)?,
            None => "",
        }] {
            let _ = write!(key, "{}:{}", part.len(), part);
        }
        let _ = write!(key, "{version}");
        let found = self.ciphers.map.get(key.as_str()).map(|c| c.as_ref().map(|c| c.clone_ref(self.py)));
        self.memo_key = key;
        if let Some(found) = found {
            return Ok(found);
        }
        let asked = match watcher {
            Some((w, v)) => self.cipher_of.call1((tenant, user, w, v)),
            None => self.cipher_of.call1((tenant, user, self.py.None(), self.py.None())),
        };
        let answer = asked.map_err(Stop::Raise)?;
        let cipher = if answer.is_none() {
            None
        } else {
            // not a native cipher: the Python path seals
            Some(answer.downcast_into::<Cipher>().map_err(|_| Fallback)?.unbind())
        };
        if self.ciphers.map.len() >= MEMO {
            self.ciphers.map.clear(); // owners are input: the memo stays bounded
        }
        self.ciphers.map.insert(self.memo_key.clone(), cipher.as_ref().map(|c| c.clone_ref(self.py)));
        Ok(cipher)
    }

    fn seal(&mut self, cipher: &Option<Py<Cipher>>, plaintext: &[u8], aad: &[u8]) -> Step<Bound<'py, PyAny>> {
        let Some(cipher) = cipher else { return Ok(PyBytes::new(self.py, b"").into_any()) };
        let nonce = match self.nonce {
            Some(given) => given,
            None => {
                if self.nonces.len() < NONCE {
                    self.nonces.resize(NONCE * 64, 0);
                    getrandom::getrandom(&mut self.nonces).map_err(|_| Fallback)?;
                }
                let start = self.nonces.len() - NONCE;
                let fresh: [u8; NONCE] = self.nonces[start..].try_into().map_err(|_| Fallback)?;
                self.nonces.truncate(start); // each nonce is used once
                fresh
            }
        };
        Ok(PyBytes::new(self.py, &seal::sealed(cipher.get(), plaintext, aad, nonce)?).into_any())
    }

    /// One evaluation's (state, receipt, entry) bytes, written in the Python path's order
    /// (state, receipt, entry; each one's content before its seal), so that an error the ring
    /// raises is the one that path would raise first.
    fn item(&mut self, item: &Bound<'py, PyAny>) -> Step<Bound<'py, PyTuple>> {
        let item = item.downcast_exact::<PyTuple>().map_err(|_| Fallback)?;
        let Ok([parts, source_id, receipt, state, entry, retention]) = <[Bound<'py, PyAny>; 6]>::try_from(item.iter().collect::<Vec<_>>()) else {
            return Err(Fallback);
        };
        self.written(&parts, &source_id, &receipt, &state, &entry, &retention)
    }

    #[allow(clippy::too_many_arguments)]
    fn written(
        &mut self,
        parts: &Bound<'py, PyAny>,
        source_id: &Bound<'py, PyAny>,
        receipt: &Bound<'py, PyAny>,
        state: &Bound<'py, PyAny>,
        entry: &Bound<'py, PyAny>,
        retention: &Bound<'py, PyAny>,
    ) -> Step<Bound<'py, PyTuple>> {
        let py = self.py;
        let none = || py.None().into_bound(py);
        let at = |o: &Bound<'py, PyAny>, name: &Bound<'py, PyString>| -> Step<Bound<'py, PyAny>> { Ok(o.getattr(name)?) };
        let [receipt_class, state_class, checkpoint_class, entry_class] = self.classes;
        let r = |index: R| field(receipt, receipt_class, index as usize);
        let s = |index: S| field(state, state_class, index as usize);
        let o = |index: O| field(entry, entry_class, index as usize);
        let tenant = r(R::tenant_id)?;
        let user = r(R::user_id)?;
        let watcher = r(R::watcher_id)?;
        let version = r(R::watcher_version)?;

        // -- the trigger's JSON, written into all three (`_write`'s `json_text`) --
        let trigger_key = r(R::trigger_key)?;
        let evaluated_at = r(R::evaluated_at)?;
        let mut trigger_text = Vec::with_capacity(64);
        canonical(&mut trigger_text, &r(R::trigger)?)?;

        // -- the watcher-state (`encode_state`), when it changed --
        let state_bytes = if state.is_none() {
            none()
        } else {
            let checkpoint = s(S::checkpoint)?;
            let checkpoint_value = if checkpoint.is_none() {
                none()
            } else {
                let key = field(&checkpoint, checkpoint_class, C::trigger_key as usize)?;
                let same = key.eq(&trigger_key)?;
                let mut own;
                let json: &[u8] = if same {
                    &trigger_text
                } else {
                    own = Vec::with_capacity(64);
                    canonical(&mut own, &field(&checkpoint, checkpoint_class, C::trigger as usize)?)?;
                    &own
                };
                let json = std::str::from_utf8(json).map_err(|_| Fallback)?;
                let value = PyDict::new(py);
                value.set_item(intern!(py, "trigger_key"), key)?;
                value.set_item(intern!(py, "trigger"), json)?;
                value.set_item(intern!(py, "observed_at"), field(&checkpoint, checkpoint_class, C::observed_at as usize)?)?;
                value.set_item(intern!(py, "position"), field(&checkpoint, checkpoint_class, C::position as usize)?)?;
                value.into_any()
            };
            let parts = parts.downcast_exact::<PyTuple>().map_err(|_| Fallback)?;
            if parts.len() != 3 {
                return Err(Fallback);
            }
            let values = [
                parts.get_item(0)?,
                parts.get_item(1)?,
                parts.get_item(2)?,
                source_id.clone(),
                s(S::version)?,
                value_of(s(S::status)?)?,
                s(S::activated_at)?,
                checkpoint_value,
                s(S::recent_triggers)?,
                value_of(s(S::last_outcome)?)?,
                value_of(s(S::last_reason)?)?,
                s(S::evaluations)?,
                value_of(s(S::closed_reason)?)?,
                s(S::revision)?,
                s(S::holds)?,
                s(S::notified_at)?,
                self.updated_at.clone(),
                none(),
            ];
            PyBytes::new(py, &encode(self.state.0, &self.state.1, &values)?).into_any()
        };

        // -- the receipt (`encode_receipt`) --
        if !version.is_exact_instance_of::<PyInt>() {
            return Err(Fallback);
        }
        let instant = evaluated_at.downcast_exact::<pyo3::types::PyDateTime>().map_err(|_| Fallback)?;
        let micros_at = avro::epoch_micros(instant)?.to_string();
        let version_text = version.extract::<i64>()?.to_string();
        let mut aad = fields(&["receipt", text(&tenant)?, text(&user)?, text(&watcher)?, &version_text]);
        aad.extend_from_slice(&fields(&[text(&trigger_key)?, &micros_at]));
        let payload = r(R::payload)?;
        let mut content = Vec::with_capacity(128 + trigger_text.len());
        content.extend_from_slice(b"{\"payload\":");
        canonical(&mut content, &payload)?; // None is null, as on the Python path
        last_trigger(&mut content, &trigger_text);
        let receipt_cipher = self.cipher(&tenant, &user, Some((&watcher, &version)))?;
        let sealed = self.seal(&receipt_cipher, &content, &aad)?;
        let until = match evaluated_at.add(retention) {
            Ok(until) => until,
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => self.far_future.clone(),
            Err(e) => return Err(e.into()),
        };
        let values = [
            tenant.clone(),
            user.clone(),
            watcher.clone(),
            version.clone(),
            source_id.clone(),
            evaluated_at,
            value_of(r(R::outcome)?)?,
            value_of(r(R::reason)?)?,
            r(R::evidence_digest)?,
            none(),
            trigger_key.clone(),
            r(R::observed_at)?,
            r(R::position)?,
            r(R::authorized)?,
            r(R::authorization)?,
            value_of(r(R::budget)?)?,
            value_of(r(R::tool_error)?)?,
            none(),
            r(R::delivery_key)?,
            r(R::note)?,
            sealed,
            until,
        ];
        let receipt_bytes = encode(self.receipt.0, &self.receipt.1, &values)?;

        // -- the outbox entry (`encode_outbox_entry`), when there is one --
        let entry_bytes = if entry.is_none() {
            none()
        } else {
            let delivery_key = o(O::delivery_key)?;
            let aad = fields(&["outbox_entry", text(&delivery_key)?]);
            let args = o(O::args)?;
            let message = o(O::message)?;
            let said = o(O::text)?;
            let mut content = Vec::with_capacity(128 + trigger_text.len());
            content.extend_from_slice(b"{\"args\":");
            if args.is_none() {
                content.extend_from_slice(b"null");
            } else {
                let listed = PyList::new(py, args.try_iter()?.collect::<PyResult<Vec<_>>>()?)?;
                canonical(&mut content, listed.as_any())?;
            }
            if !message.is_none() {
                content.extend_from_slice(b",\"message\":");
                canonical(&mut content, &message)?;
            }
            content.extend_from_slice(b",\"text\":");
            canonical(&mut content, &said)?;
            last_trigger(&mut content, &trigger_text);
            let entry_cipher = self.cipher(&o(O::tenant_id)?, &o(O::user_id)?, None)?;
            let sealed = self.seal(&entry_cipher, &content, &aad)?;
            let retry = o(O::retry)?;
            let retry_value = PyDict::new(py);
            retry_value.set_item(intern!(py, "max_attempts"), at(&retry, intern!(py, "max_attempts"))?)?;
            retry_value.set_item(intern!(py, "base_micros"), micros(&at(&retry, intern!(py, "base"))?)?)?;
            retry_value.set_item(intern!(py, "cap_micros"), micros(&at(&retry, intern!(py, "cap"))?)?)?;
            let quiet = o(O::quiet_hours)?;
            let quiet_value = if quiet.is_none() {
                none()
            } else {
                let value = PyDict::new(py);
                for name in [intern!(py, "start"), intern!(py, "end"), intern!(py, "timezone")] {
                    value.set_item(name, at(&quiet, name)?)?;
                }
                value.into_any()
            };
            let budgets = o(O::budgets)?;
            let budgets_value = if budgets.is_none() {
                none()
            } else {
                let value = PyDict::new(py);
                value.set_item(intern!(py, "window_micros"), micros(&at(&budgets, intern!(py, "window"))?)?)?;
                for name in [
                    intern!(py, "evaluations"),
                    intern!(py, "deliveries"),
                    intern!(py, "attempts"),
                    intern!(py, "tokens"),
                    intern!(py, "micro_usd"),
                ] {
                    value.set_item(name, at(&budgets, name)?)?;
                }
                value.into_any()
            };
            let retention_micros = micros(&o(O::delivery_retention)?)?;
            let values = [
                delivery_key,
                o(O::tenant_id)?,
                o(O::user_id)?,
                o(O::watcher_id)?,
                o(O::watcher_version)?,
                o(O::source_id)?,
                o(O::purpose)?,
                none(),
                value_of(o(O::outcome)?)?,
                o(O::verb)?,
                o(O::target)?,
                none(),
                none(),
                o(O::evidence_digest)?,
                o(O::evidence_observed_at)?,
                o(O::due_at)?,
                o(O::late)?,
                o(O::created_at)?,
                retry_value.into_any(),
                quiet_value,
                budgets_value,
                PyInt::new(py, retention_micros).into_any(),
                o(O::wake_session)?,
                o(O::session_id)?,
                o(O::schedule_name)?,
                o(O::schedule_time)?,
                sealed,
            ];
            PyBytes::new(py, &encode(self.outbox.0, &self.outbox.1, &values)?).into_any()
        };
        let receipt_bytes = PyBytes::new(py, &receipt_bytes).into_any();
        Ok(PyTuple::new(py, [state_bytes, receipt_bytes, entry_bytes])?)
    }
}

const MEMO: usize = 65_536;

/// The owner → cipher answers of earlier batches (by tenant, user, watcher, version), kept
/// while the key ring's `generation` stays the same: any keys record it takes in clears them.
#[pyclass(module = "vigil_native")]
struct CipherMemo {
    map: HashMap<String, Option<Py<Cipher>>>, // key: each part's length and text, then the version
    generation: u64,
}

#[pymethods]
impl CipherMemo {
    #[new]
    fn new() -> Self {
        Self { map: HashMap::new(), generation: 0 }
    }

    fn __len__(&self) -> usize {
        self.map.len()
    }
}

/// Each evaluation's `(state | None, receipt, entry | None)` bytes, or None where the Python
/// path writes it. `items`: `(parts, source_id, receipt, next_state | None, entry | None,
/// evidence_retention)`; `cipher_of(tenant, user, watcher | None, version | None)`: the key
/// ring's native cipher or None (no key: withheld), remembered in `memo` while the ring's
/// `generation` stays; `writers` and `headers`: the receipt's,
/// watcher-state's and outbox entry's native writers and single-object headers; `records`: the
/// named tuple classes `Receipt`, `WatcherState`, `AppliedTrigger` and `OutboxEntry`, read by
/// position. `nonce` only
/// for tests (else random).
/// None in place of the whole list: the writers' schemas, or the classes' fields, are not the
/// ones written here.
#[pyfunction]
#[pyo3(signature = (items, writers, headers, records, cipher_of, memo, generation, far_future, updated_at, nonce = None))]
#[allow(clippy::too_many_arguments)]
fn write_evaluations<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyList>,
    writers: (Bound<'py, Writer>, Bound<'py, Writer>, Bound<'py, Writer>),
    headers: (Vec<u8>, Vec<u8>, Vec<u8>),
    records: (Bound<'py, PyType>, Bound<'py, PyType>, Bound<'py, PyType>, Bound<'py, PyType>),
    cipher_of: &Bound<'py, PyAny>,
    memo: &Bound<'py, CipherMemo>,
    generation: u64,
    far_future: &Bound<'py, PyAny>,
    updated_at: &Bound<'py, PyAny>,
    nonce: Option<&[u8]>,
) -> PyResult<Option<Vec<PyObject>>> {
    let nonce = match nonce {
        Some(given) => Some(<[u8; NONCE]>::try_from(given).map_err(|_| pyo3::exceptions::PyValueError::new_err("a nonce is 12 bytes"))?),
        None => None,
    };
    let (receipt, state, outbox) = (writers.0.get(), writers.1.get(), writers.2.get());
    let (Some(r), Some(s), Some(o)) = (plan(py, receipt, &RECEIPT)?, plan(py, state, &STATE)?, plan(py, outbox, &OUTBOX)?) else {
        return Ok(None);
    };
    let classes = [records.0, records.1, records.2, records.3];
    let tuples = [RECEIPT_TUPLE, STATE_TUPLE, CHECKPOINT_TUPLE, OUTBOX_TUPLE];
    for (class, names) in classes.iter().zip(tuples) {
        if !laid_out(class, names)? {
            return Ok(None);
        }
    }
    let mut ciphers = memo.try_borrow_mut()?;
    if ciphers.generation != generation {
        ciphers.map.clear();
        ciphers.generation = generation;
    }
    let mut nonces = vec![0u8; NONCE * 2 * items.len()]; // at most two seals per evaluation
    if nonce.is_none() {
        getrandom::getrandom(&mut nonces).map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
    }
    let mut batch = Batch {
        py,
        cipher_of,
        ciphers,
        nonce,
        nonces,
        memo_key: String::with_capacity(128),
        far_future,
        updated_at,
        receipt: (&headers.0, r),
        state: (&headers.1, s),
        outbox: (&headers.2, o),
        classes: &classes,
    };
    let mut answers = Vec::with_capacity(items.len());
    for item in items.iter() {
        answers.push(match batch.item(&item) {
            Ok(written) => written.into_any().unbind(),
            Err(Fallback) => py.None(),
            Err(Stop::Raise(error)) => return Err(error),
        });
    }
    Ok(Some(answers))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(write_evaluations, m)?)?;
    m.add_class::<CipherMemo>()?;
    Ok(())
}
