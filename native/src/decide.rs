//! One evaluation's plain case decided natively (`pipeline.rules.evaluation.evaluate`, the
//! specification and the fallback): an event for an `every` or `once` watcher whose state is
//! active, within its deadline, authorized (the caller's allow), of its source and type, fresh,
//! budgeted `ok` or `exhausted`, then judged by the compiled conditions. The result is the same
//! `Evaluation` — its receipt, next state and checkpoint built here in their classes' field
//! order, and its outbox entry from the definition's `entry_fields` with the default message
//! (`message.rs`); an entry with a template or a message `message.rs` leaves to Python is
//! `build_entry`'s, and the kept payload leaves (`keep_leaves`) and a close's lifecycle move
//! (`transition`) are the Python rules' own calls.
//!
//! Anything else — another mode, source or status, a denial, a mismatch, stale or future
//! evidence, the deadline reached, a verdict other than `ok` or `exhausted`, a value of an
//! unexpected type — is None before anything is asked of the budget or any condition, except a
//! budget verdict of `unavailable`: then None after the gate answered, and the Python path asks
//! the gate again (every gate answers the same question the same way: a charge counts once per
//! token). An exception a gate or a condition raises stands, as it would on the Python path.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDateTime, PyDict, PyString, PyTuple, PyType};

use crate::{keys, message};

/// The named tuples' fields this module writes by position; checked when a `Decider` is made.
const RECEIPT: [&str; 21] = [
    "tenant_id", "user_id", "watcher_id", "watcher_version", "evaluated_at", "evidence_digest",
    "trigger", "trigger_key", "observed_at", "outcome", "reason", "authorized", "position",
    "authorization", "budget", "tool_error", "payload", "delivery_key", "note", "erased",
    "retain_until",
];
const STATE: [&str; 12] = [
    "version", "status", "activated_at", "checkpoint", "recent_triggers", "last_outcome",
    "last_reason", "evaluations", "closed_reason", "revision", "holds", "notified_at",
];
const APPLIED: [&str; 4] = ["trigger_key", "trigger", "observed_at", "position"];
const EVALUATION: [&str; 6] = ["outcome", "reason", "next_state", "receipt", "outbox", "close"];
const ENTRY: [&str; 28] = [
    "delivery_key", "tenant_id", "user_id", "watcher_id", "watcher_version", "source_id",
    "purpose", "trigger", "outcome", "verb", "target", "due_at", "created_at", "retry",
    "delivery_retention", "text", "message", "args", "evidence_digest", "evidence_observed_at",
    "late", "quiet_hours", "budgets", "wake_session", "session_id", "schedule_name",
    "schedule_time", "erased",
];
const ENTRY_FIELDS: [&str; 20] = [
    "tenant_id", "user_id", "watcher_id", "version", "source_id", "purpose", "verb", "target",
    "retry", "delivery_retention", "text", "args", "quiet_hours", "budgets", "wake_session",
    "session_id", "notify", "template", "retained", "schedule_name",
];

/// Not decided here: the Python path decides.
struct Elsewhere;

impl From<PyErr> for Elsewhere {
    fn from(_: PyErr) -> Self {
        Elsewhere
    }
}

fn laid_out(class: &Bound<'_, PyType>, names: &[&str]) -> PyResult<()> {
    let fields: Vec<String> = class.getattr(intern!(class.py(), "_fields"))?.extract()?;
    if fields != names {
        let what = class.name()?;
        return Err(pyo3::exceptions::PyValueError::new_err(format!("{what}'s fields are not the ones written here")));
    }
    Ok(())
}

/// The rules' constants, classes and calls the plain case needs (`pipeline.rules.evaluation`
/// hands them over once).
#[pyclass(module = "vigil_native", frozen)]
pub struct Decider {
    event_kind: PyObject,
    every: PyObject,
    once: PyObject,
    active: PyObject,
    event_source: Py<PyType>,
    satisfied: PyObject,
    pending: PyObject,
    terminal_unsatisfied: PyObject,
    unavailable: PyObject,
    condition_true: PyObject,
    condition_false: PyObject,
    terminal_condition: PyObject,
    budget_exhausted: PyObject,
    close_satisfied: PyObject,
    close_terminal: PyObject,
    ok: PyObject,
    exhausted: PyObject,
    receipt: Py<PyType>,
    state: Py<PyType>,
    applied: Py<PyType>,
    evaluation: Py<PyType>,
    note_duplicate: PyObject,
    future_skew: PyObject,
    recent: usize,
    build_entry: PyObject,
    keep_leaves: PyObject,
    transition: PyObject,
    close_event: PyObject,
    tuple_new: PyObject,
    entry: Py<PyType>,
    max_value: usize,
    max_message: usize,
    absent: String,
}

#[pymethods]
impl Decider {
    /// `enums`: EvidenceKind.EVENT, Mode.EVERY, Mode.ONCE, WatcherStatus.ACTIVE, Outcome
    /// SATISFIED, PENDING, TERMINAL_UNSATISFIED, UNAVAILABLE, Reason CONDITION_TRUE,
    /// CONDITION_FALSE, TERMINAL_CONDITION, BUDGET_EXHAUSTED, CloseReason SATISFIED,
    /// TERMINAL_UNSATISFIED, BudgetVerdict OK, EXHAUSTED; `classes`: EventSource, Receipt,
    /// WatcherState, AppliedTrigger, Evaluation; `calls`: build_entry, keep_leaves, transition,
    /// close_event; `entries`: OutboxEntry, EntryFields, and the message's MAX_VALUE,
    /// MAX_MESSAGE and ABSENT.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        enums: [PyObject; 16],
        classes: [Bound<'_, PyType>; 5],
        note_duplicate: PyObject,
        future_skew: PyObject,
        recent: usize,
        calls: [PyObject; 4],
        entries: (Bound<'_, PyType>, Bound<'_, PyType>, usize, usize, String),
    ) -> PyResult<Self> {
        let [event_source, receipt, state, applied, evaluation] = classes;
        let (entry, entry_fields, max_value, max_message, absent) = entries;
        laid_out(&entry, &ENTRY)?;
        laid_out(&entry_fields, &ENTRY_FIELDS)?;
        laid_out(&receipt, &RECEIPT)?;
        laid_out(&state, &STATE)?;
        laid_out(&applied, &APPLIED)?;
        laid_out(&evaluation, &EVALUATION)?;
        let [event_kind, every, once, active, satisfied, pending, terminal_unsatisfied, unavailable, condition_true, condition_false, terminal_condition, budget_exhausted, close_satisfied, close_terminal, ok, exhausted] =
            enums;
        let [build_entry, keep_leaves, transition, close_event] = calls;
        let tuple_new = py.get_type::<PyTuple>().getattr(intern!(py, "__new__"))?.unbind();
        Ok(Self {
            event_kind,
            every,
            once,
            active,
            event_source: event_source.unbind(),
            satisfied,
            pending,
            terminal_unsatisfied,
            unavailable,
            condition_true,
            condition_false,
            terminal_condition,
            budget_exhausted,
            close_satisfied,
            close_terminal,
            ok,
            exhausted,
            receipt: receipt.unbind(),
            state: state.unbind(),
            applied: applied.unbind(),
            evaluation: evaluation.unbind(),
            note_duplicate,
            future_skew,
            recent,
            build_entry,
            keep_leaves,
            transition,
            close_event,
            tuple_new,
            entry: entry.unbind(),
            max_value,
            max_message,
            absent,
        })
    }

    /// The `Evaluation` of the plain case, or None (the Python path's).
    fn evaluate<'py>(
        &self,
        definition: &Bound<'py, PyAny>,
        state: &Bound<'py, PyAny>,
        evidence: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
        budget: &Bound<'py, PyAny>,
        authorization: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Ok(checked) = self.checked(definition, state, evidence, now, authorization) else {
            return Ok(None);
        };
        let py = definition.py();
        // -- the budget, asked only once every earlier check passed (as `_decide` asks it) --
        let verdict = budget.call1((evidence,))?;
        let budgeted = verdict.is(&self.ok);
        if !budgeted && !verdict.is(&self.exhausted) {
            return Ok(None); // unavailable (or anything else): the Python path's
        }
        // -- `_judge`, or the exhausted budget's step --
        let (outcome, reason, close) = if budgeted {
            let payload = evidence.getattr(intern!(py, "payload"))?;
            let holds = definition.getattr(intern!(py, "predicate"))?.call1((&payload,))?;
            let terminal = definition.getattr(intern!(py, "terminal_predicate"))?;
            let is_terminal = !terminal.is_none() && terminal.call1((&payload,))?.is_truthy()?;
            if is_terminal {
                (&self.terminal_unsatisfied, &self.terminal_condition, Some(&self.close_terminal))
            } else if holds.is_truthy()? {
                let closes = checked.mode.is(&self.once);
                (&self.satisfied, &self.condition_true, closes.then_some(&self.close_satisfied))
            } else {
                (&self.pending, &self.condition_false, None)
            }
        } else {
            (&self.unavailable, &self.budget_exhausted, None)
        };
        let Checked { key, recent, fields, .. } = checked;
        let true_ = reason.is(&self.condition_true);
        let applied = recent.contains(&key)?; // `WatcherState.applied`
        let duplicate = true_ && applied;
        let sends = true_ && !duplicate;
        let identity = PyDict::new(py);
        identity.set_item(intern!(py, "kind"), intern!(py, "event"))?;
        identity.set_item(intern!(py, "event_type"), evidence.getattr(intern!(py, "event_type"))?)?;
        identity.set_item(intern!(py, "event_id"), evidence.getattr(intern!(py, "event_id"))?)?;
        let digest = evidence.call_method0(intern!(py, "digest"))?;
        let kept = if budgeted {
            let paths = fields.get_item(18)?; // retained: the privacy allowlist's paths
            self.keep_leaves.call1(py, (evidence.getattr(intern!(py, "payload"))?, paths))?.into_bound(py)
        } else {
            py.None().into_bound(py)
        };
        let key = key.into_any();
        let entry = if sends {
            let made = self.entry_of(&fields, evidence, &key, now, &identity, &digest, outcome.bind(py), &kept)?;
            match made {
                Some(entry) => entry,
                None => {
                    let args = (definition, evidence, &key, now, &identity, &digest, outcome, &kept);
                    self.build_entry.call1(py, args)?.into_bound(py)
                }
            }
        } else {
            py.None().into_bound(py)
        };
        let note = if duplicate { self.note_duplicate.bind(py).clone() } else { PyString::intern(py, "").into_any() };
        let observed_at = evidence.getattr(intern!(py, "observed_at"))?;
        let position = evidence.getattr(intern!(py, "position"))?;
        let none = || py.None().into_bound(py);
        let receipt = self.make(
            &self.receipt,
            [
                fields.get_item(0)?, // tenant_id
                fields.get_item(1)?, // user_id
                fields.get_item(2)?, // watcher_id
                checked.version,
                now.clone(),
                digest,
                identity.clone().into_any(),
                key.clone(),
                observed_at.clone(),
                outcome.bind(py).clone(),
                reason.bind(py).clone(),
                true.into_pyobject(py)?.to_owned().into_any(), // authorized
                position.clone(),
                authorization.str()?.into_any(),
                verdict.clone(),
                none(), // tool_error: an event carries none
                kept,
                if entry.is_none() { none() } else { key.clone() }, // delivery_key
                note,
                false.into_pyobject(py)?.to_owned().into_any(), // erased
                none(),                                          // retain_until: the writer's
            ],
        )?;
        // -- `_next_state`: the checkpoint advances, the evaluation counts --
        let checkpoint = self.make(&self.applied, [key.clone(), identity.into_any(), observed_at, position])?;
        // `WatcherState.remember`: the key last, once, the newest `recent` kept
        let mut kept_triggers: Vec<Bound<'py, PyAny>> = Vec::with_capacity(recent.len() + 1);
        if applied {
            for trigger in recent.iter() {
                if !trigger.eq(&key)? {
                    kept_triggers.push(trigger);
                }
            }
        } else {
            kept_triggers.extend(recent.iter()); // not there: nothing to compare
        }
        kept_triggers.push(key);
        let from = kept_triggers.len().saturating_sub(self.recent);
        let remembered = PyTuple::new(py, &kept_triggers[from..])?;
        let field = |name: &Bound<'py, PyString>| state.getattr(name);
        let (status, closed) = match close {
            None => (field(intern!(py, "status"))?, field(intern!(py, "closed_reason"))?),
            Some(close) => {
                let event = self.close_event.call1(py, (close,))?;
                (self.transition.call1(py, (field(intern!(py, "status"))?, event))?.into_bound(py), close.bind(py).clone())
            }
        };
        let one = 1i64.into_pyobject(py)?;
        let next_state = self.make(
            &self.state,
            [
                field(intern!(py, "version"))?,
                status,
                field(intern!(py, "activated_at"))?,
                checkpoint,
                remembered.into_any(),
                outcome.bind(py).clone(),
                reason.bind(py).clone(),
                field(intern!(py, "evaluations"))?.add(&one)?,
                closed,
                field(intern!(py, "revision"))?.add(&one)?,
                field(intern!(py, "holds"))?,
                field(intern!(py, "notified_at"))?,
            ],
        )?;
        let close = match close {
            Some(close) => close.bind(py).clone(),
            None => none(),
        };
        let result = [outcome.bind(py).clone(), reason.bind(py).clone(), next_state, receipt, entry, close];
        Ok(Some(self.make(&self.evaluation, result)?))
    }
}

/// What the checks before the budget found, for the rest of the evaluation.
struct Checked<'py> {
    fields: Bound<'py, PyTuple>, // the definition's `entry_fields`
    mode: Bound<'py, PyAny>,
    version: Bound<'py, PyAny>,
    key: Bound<'py, PyString>,
    recent: Bound<'py, PyTuple>,
}

impl Decider {
    /// `_decide`'s checks before the budget, in the plain case only (else `Elsewhere`): an
    /// active state within its deadline, the caller's allow, an event of the watcher's source
    /// and type, fresh; and the delivery key of its trigger.
    fn checked<'py>(
        &self,
        definition: &Bound<'py, PyAny>,
        state: &Bound<'py, PyAny>,
        evidence: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
        authorization: &Bound<'py, PyAny>,
    ) -> Result<Checked<'py>, Elsewhere> {
        let py = definition.py();
        let version = definition.getattr(intern!(py, "version"))?;
        let instant = now.downcast_exact::<PyDateTime>().map_err(|_| Elsewhere)?;
        if version.is_none() || !crate::avro::in_utc(instant)? {
            return Err(Elsewhere);
        }
        if !evidence.getattr(intern!(py, "source_kind"))?.is(&self.event_kind) {
            return Err(Elsewhere);
        }
        let mode = definition.getattr(intern!(py, "mode"))?;
        if !(mode.is(&self.every) || mode.is(&self.once)) {
            return Err(Elsewhere);
        }
        let source = definition.getattr(intern!(py, "source"))?;
        if !source.get_type().is(self.event_source.bind(py)) {
            return Err(Elsewhere);
        }
        if !state.getattr(intern!(py, "status"))?.is(&self.active) {
            return Err(Elsewhere);
        }
        let deadline = definition.call_method1(intern!(py, "deadline"), (state.getattr(intern!(py, "activated_at"))?,))?;
        if !deadline.is_none() && now.ge(&deadline)? {
            return Err(Elsewhere); // expired, or the final evaluation at the deadline
        }
        if !authorization.getattr(intern!(py, "allowed"))?.is(pyo3::types::PyBool::new(py, true).as_any()) {
            return Err(Elsewhere);
        }
        let entry = definition.getattr(intern!(py, "entry_fields"))?.downcast_into::<PyTuple>().map_err(|_| Elsewhere)?;
        let matches = evidence.getattr(intern!(py, "source_id"))?.eq(entry.get_item(4)?)? // source_id
            && evidence.getattr(intern!(py, "event_type"))?.eq(source.getattr(intern!(py, "event_type"))?)?
            && evidence.getattr(intern!(py, "watcher_key"))?.is_none()
            && evidence.getattr(intern!(py, "tool_error"))?.is_none()
            && evidence.getattr(intern!(py, "scheduled_at"))?.is_none(); // its instant is now
        if !matches {
            return Err(Elsewhere);
        }
        let observed = evidence.getattr(intern!(py, "observed_at"))?;
        let max_age = source.getattr(intern!(py, "max_age"))?;
        if !max_age.is_none() && observed.lt(now.sub(&max_age)?)? {
            return Err(Elsewhere); // stale
        }
        if observed.gt(now.add(self.future_skew.bind(py))?)? {
            return Err(Elsewhere); // future skew
        }
        let recent = state.getattr(intern!(py, "recent_triggers"))?.downcast_into_exact::<PyTuple>().map_err(|_| Elsewhere)?;
        // -- the trigger's delivery key (`delivery_key_from` of an `EventTrigger`) --
        let prefix = definition.getattr(intern!(py, "key_prefix"))?;
        let prefix = prefix.downcast::<pyo3::types::PyBytes>().map_err(|_| Elsewhere)?.as_bytes();
        let fields = PyTuple::new(
            py,
            [
                intern!(py, "event").clone().into_any(),
                evidence.getattr(intern!(py, "event_type"))?,
                evidence.getattr(intern!(py, "event_id"))?,
            ],
        )?;
        let mut out = Vec::with_capacity(prefix.len() + 96);
        out.extend_from_slice(prefix);
        keys::push_fields(&mut out, fields.as_any())?.ok_or(Elsewhere)?;
        let key = PyString::new(py, &keys::sha256_hex(&out));
        Ok(Checked { fields: entry, mode, version, key, recent })
    }

    /// `build_entry` of an event's notification from the definition's `entry_fields`, the
    /// message rendered by `message.rs`; None (`build_entry`'s) for a template, a schedule or a
    /// message outside `message.rs`'s plain case.
    #[allow(clippy::too_many_arguments)]
    fn entry_of<'py>(
        &self,
        fields: &Bound<'py, PyTuple>,
        evidence: &Bound<'py, PyAny>,
        key: &Bound<'py, PyAny>,
        now: &Bound<'py, PyAny>,
        identity: &Bound<'py, PyDict>,
        digest: &Bound<'py, PyAny>,
        outcome: &Bound<'py, PyAny>,
        kept: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let py = fields.py();
        let at = |i: usize| fields.get_item(i);
        if !at(19)?.is_none() || !at(17)?.is_none() {
            return Ok(None); // a schedule's fire, or a template: `build_entry`'s
        }
        let observed_at = evidence.getattr(intern!(py, "observed_at"))?;
        let message = if at(16)?.is_truthy()? {
            let named = [
                at(2)?,
                at(5)?,
                outcome.getattr(intern!(py, "value"))?,
                evidence.getattr(intern!(py, "event_type"))?,
                evidence.getattr(intern!(py, "event_id"))?,
            ];
            let (max_value, max_message) = (self.max_value, self.max_message);
            match message::default_message(named, &observed_at, kept, &at(18)?, max_value, max_message, &self.absent)? {
                Some(text) => PyString::new(py, &text).into_any(),
                None => return Ok(None),
            }
        } else {
            py.None().into_bound(py)
        };
        let none = || py.None().into_bound(py);
        let no = || false.into_pyobject(py).map(|b| b.to_owned().into_any());
        let values = [
            key.clone(),
            at(0)?,
            at(1)?,
            at(2)?,
            at(3)?,
            at(4)?,
            at(5)?,
            identity.clone().into_any(),
            outcome.clone(),
            at(6)?,
            at(7)?,
            now.clone(), // due_at: an event's is now
            now.clone(), // created_at
            at(8)?,
            at(9)?,
            at(10)?,
            message,
            at(11)?,
            digest.clone(),
            observed_at,
            no()?, // late: a schedule's only
            at(12)?,
            at(13)?,
            at(14)?,
            at(15)?,
            none(), // schedule_name
            none(), // schedule_time
            no()?,  // erased
        ];
        Ok(Some(self.make(&self.entry, values)?))
    }

    fn make<'py, const N: usize>(&self, class: &Py<PyType>, values: [Bound<'py, PyAny>; N]) -> PyResult<Bound<'py, PyAny>> {
        let py = values[0].py();
        let values = PyTuple::new(py, values)?;
        self.tuple_new.bind(py).call1((class.bind(py), values))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Decider>()?;
    Ok(())
}
