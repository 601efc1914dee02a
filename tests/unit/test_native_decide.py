"""An evaluation decided natively is the Python rules' (``native/src/decide.rs`` against
``pipeline.rules.evaluation.evaluate``): the same ``Evaluation`` — outcome, reason, close, receipt,
next state, checkpoint and outbox entry, each value of the same type — or the same exception, for
the plain case it decides and every case it leaves (other modes and sources, paused and closed
states, denials, mismatched sources and types, stale and future evidence, deadlines, every budget
verdict, duplicates, terminal conditions, payloads of every shape)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.rules import evaluation
from pipeline.rules.authz import AuthzDecision, DenyReason
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.decider import DECIDER
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.evaluation import Evaluation, evaluate
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.keys import delivery_key_from
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.watcher_state import AppliedTrigger, WatcherState
from tests.native import needs_native

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
_ALLOW = AuthzDecision(True, grant_id="g")


# Every field an entry copies from its definition (an event watcher's verb is notify): the
# outbox entry built natively from ``entry_fields`` is ``build_entry``'s whatever they hold.
_DELIVERIES: list[dict[str, Any]] = [
    {"target": "ops-hook"},
    {"target": "ops-hook", "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "UTC"}},
    {"target": "ops-hook", "wake_session": True},
]


def _definition(
    mode: str,
    expires: timedelta,
    terminal: bool,
    retain: list[str],
    template: bool,
    delivery: dict[str, Any] | None = None,
    purpose: str = "ops.alert",
) -> WatcherDefinition:
    body: dict[str, Any] = {
        "watcher_id": "w-1",
        "purpose": purpose,
        "mode": mode,
        "source": {"kind": "event", "source_id": "ci", "event_type": "build", "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": dict(delivery or _DELIVERIES[0]),
        "privacy": {"retain_paths": retain},
    }
    if delivery is not None and delivery is not _DELIVERIES[0]:
        body["budgets"] = {"window": "1h", "deliveries": 5}
        body["session_id"] = "s-1"
    if terminal and mode == "once":  # only a once watch has one
        body["terminal_condition"] = {"eq": ["status", "cancelled"]}
    body["expires_at"] = (NOW + expires).isoformat()  # every watcher has a deadline
    if template and "status" in retain and body["delivery"].get("verb", "notify") == "notify":
        body["delivery"]["message"] = "{watcher_id}: {payload.status} at {observed_at}"
    definition = WatcherDefinition.from_json(body, tenant_id="acme", user_id="ann")
    return definition.with_version(3).compile()


_PAYLOADS = st.fixed_dictionaries(
    {"status": st.sampled_from(["failed", "passed", "cancelled", 7, None, "échoué"])},
    optional={
        "n": st.integers() | st.floats(allow_nan=False) | st.booleans() | st.text(max_size=5),
        "nested": st.dictionaries(st.sampled_from(["x", "y"]), st.integers() | st.text(max_size=3)),
    },
)


def _evidence(
    source_id: str, event_type: str, age: timedelta, payload: dict[str, Any], event_id: str
) -> Evidence:
    return Evidence(
        EvidenceKind.EVENT,
        source_id,
        NOW - age,
        event_type=event_type,
        event_id=event_id,
        payload=payload,
        position="events:0:9",
    )


def _state(
    definition: WatcherDefinition, evidence: Evidence, status: WatcherStatus, seen: int, n: int
) -> WatcherState:
    key = delivery_key_from(definition.key_prefix, evidence.trigger())
    recent = [f"{i:064x}" for i in range(seen)]
    if n % 3 == 0:
        recent.insert(n % (seen + 1), key)  # applied before: a duplicate
    checkpoint = AppliedTrigger("0" * 64, {"kind": "event"}, NOW, "events:0:1") if n % 2 else None
    return WatcherState(
        version=3,
        status=status,
        activated_at=NOW - timedelta(days=1),
        checkpoint=checkpoint,
        recent_triggers=recent,
        evaluations=n,
        revision=n + 1,
        holds=None if n % 4 else True,
    )


@contextmanager
def _python_rules() -> Iterator[None]:
    """Inside, ``evaluate`` decides every case itself (no native decider)."""
    vars(evaluation)["DECIDER"] = None
    try:
        yield
    finally:
        vars(evaluation)["DECIDER"] = DECIDER


def _typed(value: Any) -> Any:
    """``value`` with every type spelled out (``1`` and ``True`` and ``1.0`` differ)."""
    if isinstance(value, tuple):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _typed(v)) for k, v in value.items()))
    return (type(value).__name__, repr(value))


def _decided(
    definition: WatcherDefinition,
    state: WatcherState,
    evidence: Evidence,
    verdict: BudgetVerdict,
    authorization: AuthzDecision | None,
    now: datetime,
) -> tuple[Any, list[Evidence]]:
    """What ``evaluate`` gave (typed, or the exception's type and text), and what its gate was
    asked."""
    asked: list[Evidence] = []

    def gate(seen: Evidence) -> BudgetVerdict:
        asked.append(seen)
        return verdict

    try:
        result = evaluate(definition, state, evidence, (), now, gate, authorization=authorization)
    except Exception as exc:
        return (type(exc).__name__, str(exc)), asked
    assert isinstance(result, Evaluation)
    return _typed(tuple(result)), asked


_PLAIN: dict[str, Any] = {
    "source_id": "ci",
    "event_type": "build",
    "age": timedelta(minutes=3),
    "status": WatcherStatus.ACTIVE,
    "verdict": BudgetVerdict.OK,
    "authorization": _ALLOW,
    "zone": UTC,
    "mode": "every",
    "expires": timedelta(days=30),
}
_OTHER: dict[str, Any] = {
    "source_id": st.sampled_from(["cd", "ci"]),
    "event_type": st.sampled_from(["deploy", "build"]),
    "age": st.sampled_from(
        [timedelta(0), timedelta(minutes=10), timedelta(minutes=11), -timedelta(seconds=30)]
    )
    | st.just(-timedelta(seconds=31)),
    "status": st.sampled_from(WatcherStatus),
    "verdict": st.sampled_from(BudgetVerdict),
    "authorization": st.sampled_from(
        [AuthzDecision(True), AuthzDecision(False, DenyReason.NO_GRANT, "no grant"), None]
    ),
    "zone": st.just(timezone(timedelta(hours=1))),
    "mode": st.sampled_from(["once", "change"]),
    "expires": st.sampled_from([timedelta(0), -timedelta(hours=1)]),
}


@needs_native
@settings(max_examples=500, deadline=None)
@given(
    others=st.lists(st.sampled_from(sorted(_OTHER)), max_size=2, unique=True),
    terminal=st.booleans(),
    retain=st.sampled_from([[], ["status"], ["status", "n", "nested.x"]]),
    template=st.booleans(),
    delivery=st.sampled_from(_DELIVERIES),
    payload=_PAYLOADS,
    event_id=st.sampled_from(["b-1", "b-2", "b-ü"]),
    seen=st.integers(0, 70),
    n=st.integers(0, 11),
    data=st.data(),
)
def test_native_decisions_are_the_python_rules(
    others: list[str],
    terminal: bool,
    retain: list[str],
    template: bool,
    delivery: dict[str, Any],
    payload: dict[str, Any],
    event_id: str,
    seen: int,
    n: int,
    data: st.DataObject,
) -> None:
    """The plain case with none, one or two of its dimensions (source, type, age, status,
    verdict, authorization, zone, mode, deadline) drawn otherwise."""
    x = {**_PLAIN, **{name: data.draw(_OTHER[name], name) for name in others}}
    definition = _definition(x["mode"], x["expires"], terminal, retain, template, delivery)
    evidence = _evidence(x["source_id"], x["event_type"], x["age"], payload, event_id)
    state = _state(definition, evidence, x["status"], seen, n)
    now = NOW.astimezone(x["zone"])
    verdict, authorization = x["verdict"], x["authorization"]
    with _python_rules():
        expected, python_asked = _decided(definition, state, evidence, verdict, authorization, now)
    got, native_asked = _decided(definition, state, evidence, verdict, authorization, now)
    assert got == expected
    if verdict is BudgetVerdict.UNAVAILABLE:  # asked once natively, then once by the Python path
        assert (
            native_asked[-len(python_asked) :] == python_asked if python_asked else not native_asked
        )
    else:
        assert native_asked == python_asked


@needs_native
def test_the_plain_case_is_decided_natively() -> None:
    """An active watcher's fresh, authorized, matching event is decided by the decider itself
    (None would mean the Python path decided it), satisfied and not."""
    definition = _definition("every", timedelta(days=30), False, ["status"], False)
    for status, outcome in (("failed", "satisfied"), ("passed", "pending")):
        evidence = _evidence("ci", "build", timedelta(minutes=1), {"status": status}, "b-1")
        state = _state(definition, evidence, WatcherStatus.ACTIVE, 3, 1)
        gate = evaluation.recorded_budget(BudgetVerdict.OK)
        native = DECIDER.evaluate(definition, state, evidence, NOW, gate, _ALLOW)
        assert native is not None and native.outcome.value == outcome
        assert (native.outbox is not None) == (outcome == "satisfied")


@needs_native
@pytest.mark.parametrize(
    ("mode", "status", "verdict", "seen"),
    [
        ("once", "cancelled", BudgetVerdict.OK, 3),  # terminal: closes terminal_unsatisfied
        ("once", "failed", BudgetVerdict.OK, 3),  # satisfied: closes
        ("every", "failed", BudgetVerdict.OK, 0),  # a duplicate (n = 0 applied it before)
        ("every", "failed", BudgetVerdict.EXHAUSTED, 64),
        ("every", "failed", BudgetVerdict.UNAVAILABLE, 1),
    ],
)
def test_closes_duplicates_and_verdicts_are_the_python_rules(
    mode: str, status: str, verdict: BudgetVerdict, seen: int
) -> None:
    definition = _definition(mode, timedelta(days=30), True, ["status"], True)
    evidence = _evidence("ci", "build", timedelta(minutes=1), {"status": status}, "b-1")
    state = _state(definition, evidence, WatcherStatus.ACTIVE, seen, 0 if seen == 0 else 1)
    with _python_rules():
        expected, _ = _decided(definition, state, evidence, verdict, _ALLOW, NOW)
    assert _decided(definition, state, evidence, verdict, _ALLOW, NOW)[0] == expected
    gate = evaluation.recorded_budget(verdict)
    native = DECIDER.evaluate(definition, state, evidence, NOW, gate, _ALLOW)
    assert (native is None) == (verdict is BudgetVerdict.UNAVAILABLE)
