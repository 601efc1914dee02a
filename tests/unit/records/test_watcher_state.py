"""The watcher state as named tuples: the same values, checks and Avro bytes as the pydantic
models they replaced (kept here as the oracle), and what evaluation builds unchecked is
always what the checked constructor accepts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.watcher_state import decode_state, encode_state
from pipeline.rules.authz import Action, Grant
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import CloseReason, WatcherStatus
from pipeline.rules.outcomes import Outcome, Reason
from pipeline.rules.watcher_state import RECENT_TRIGGERS, AppliedTrigger, WatcherState

pytestmark = pytest.mark.unit

CODEC = default_codec()
SCHEMAS = Path(__file__).resolve().parents[3] / "schemas"
KEY = ("acme", "u-42", "w")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class OldCheckpoint(BaseModel):
    """The pydantic model the applied trigger (then ``Checkpoint``) was before (issue 19)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trigger_key: str
    trigger: dict[str, str]
    observed_at: datetime
    position: str | None = None


class OldState(BaseModel):
    """The pydantic model ``WatcherState`` was before (issue 19), with the two fields
    ``watcher_state.v2`` added (issue 31: a change watcher's truth), null by default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(ge=0)
    status: WatcherStatus
    activated_at: datetime | None = None
    checkpoint: OldCheckpoint | None = None
    recent_triggers: tuple[str, ...] = ()
    last_outcome: Outcome | None = None
    last_reason: Reason | None = None
    evaluations: int = Field(default=0, ge=0)
    closed_reason: CloseReason | None = None
    revision: int = Field(default=0, ge=0)
    holds: bool | None = None
    notified_at: datetime | None = None


def _member(kind: Any) -> st.SearchStrategy[Any]:
    """A member, its text, or text that names none (what a decoded record can carry)."""
    return st.one_of(
        st.sampled_from(list(kind)), st.sampled_from([m.value for m in kind]), st.text(max_size=8)
    )


instants = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
)
counts = st.integers(min_value=-3, max_value=2**63 - 1)
texts = st.text(max_size=12)
triggers = st.one_of(
    st.dictionaries(texts, texts, max_size=3),
    st.dictionaries(texts, st.integers(), min_size=1, max_size=2),  # not a trigger
)
checkpoints = st.none() | st.fixed_dictionaries(
    {
        "trigger_key": texts,
        "trigger": triggers,
        "observed_at": instants,
        "position": st.none() | texts,
    }
)
states = st.fixed_dictionaries(
    {
        "version": counts,
        "status": _member(WatcherStatus),
        "activated_at": st.none() | instants,
        "checkpoint": checkpoints,
        "recent_triggers": st.lists(texts, max_size=4),
        "last_outcome": st.none() | _member(Outcome),
        "last_reason": st.none() | _member(Reason),
        "evaluations": counts,
        "closed_reason": st.none() | _member(CloseReason),
        "revision": counts,
        "holds": st.none() | st.booleans(),
        "notified_at": st.none() | instants,
    }
)


def _old(fields: dict[str, Any]) -> OldState | None:
    try:
        return OldState(**fields)
    except ValidationError:
        return None


def _new(fields: dict[str, Any]) -> WatcherState | None:
    raw = fields["checkpoint"]
    try:
        checkpoint = None if raw is None else AppliedTrigger(**raw)
        return WatcherState(**{**fields, "checkpoint": checkpoint})
    except DefinitionError:
        return None


@pytest.mark.slow
@settings(max_examples=800, deadline=None)
@given(states)
def test_accepts_what_the_model_accepted_and_writes_the_same_bytes(fields: dict[str, Any]) -> None:
    old, new = _old(fields), _new(fields)
    assert (old is None) == (new is None), (old, new)
    if old is None or new is None:
        return
    assert new._asdict() == {**old.model_dump(), "checkpoint": new.checkpoint}
    assert (new.checkpoint is None) == (old.checkpoint is None)
    if new.checkpoint is not None and old.checkpoint is not None:
        assert new.checkpoint._asdict() == old.checkpoint.model_dump()
    data = encode_state(CODEC, KEY, "ci", new, NOW)
    assert data == encode_state(CODEC, KEY, "ci", old, NOW)  # type: ignore[arg-type]
    assert decode_state(CODEC, data) == new


def test_a_stored_state_out_of_range_is_undecodable() -> None:
    state = WatcherState(version=1, status=WatcherStatus.ACTIVE)
    bad = CODEC.encode(
        "watcher_state",
        {
            "tenant_id": "acme",
            "user_id": "u",
            "watcher_id": "w",
            "source_id": "s",
            "version": -1,
            "status": state.status.value,
            "activated_at": None,
            "checkpoint": None,
            "recent_triggers": [],
            "last_outcome": None,
            "last_reason": None,
            "evaluations": 0,
            "closed_reason": None,
            "revision": 0,
            "updated_at": NOW,
        },
    )
    with pytest.raises(SerdeError, match="version"):
        decode_state(CODEC, bad)


def test_a_state_written_before_change_mode_reads_as_unknown_truth() -> None:
    v1 = json.loads((SCHEMAS / "watcher_state.v1.avsc").read_text(encoding="utf-8"))
    before = AvroCodec.from_documents({"watcher_state.v1.avsc": v1})
    fields = {
        "tenant_id": "acme", "user_id": "u", "watcher_id": "w", "source_id": "ci",
        "version": 3, "status": "active", "activated_at": None, "checkpoint": None,
        "recent_triggers": [], "last_outcome": "satisfied", "last_reason": "condition_true",
        "evaluations": 7, "closed_reason": None, "revision": 9, "updated_at": NOW,
    }  # fmt: skip
    read = decode_state(CODEC, before.encode("watcher_state", fields))
    state = WatcherState(3, "active", None, None, (), "satisfied", "condition_true", 7, None, 9)
    assert read == state and (read.holds, read.notified_at) == (None, None)
    firing = state.replace(holds=True, notified_at=NOW)
    assert decode_state(CODEC, encode_state(CODEC, KEY, "ci", firing, NOW)) == firing


def test_replace_checks_like_the_constructor_and_the_tuple_is_immutable() -> None:
    state = WatcherState(version=1, status=WatcherStatus.ACTIVE)
    assert state.replace(status="paused").status is WatcherStatus.PAUSED
    with pytest.raises(DefinitionError, match="revision"):
        state.replace(revision=-1)
    with pytest.raises(AttributeError):
        state.status = WatcherStatus.PAUSED  # type: ignore[misc]


DEFINITION = WatcherDefinition.from_json(
    {
        "watcher_id": "w",
        "purpose": "ops.alert",
        "mode": "once",
        "source": {"kind": "event", "source_id": "ci", "event_type": "t", "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2027-01-01T00:00:00Z",
    },
    tenant_id="acme",
    user_id="u-42",
).with_version(1)
CHANGE = WatcherDefinition.from_json(
    {
        **DEFINITION.to_json(),
        "mode": "change",
        "change": {"resolved": True, "repeat_after": "1m"},
    },
    tenant_id="acme",
    user_id="u-42",
).with_version(1)
GRANT = Grant(
    grant_id="g-1",
    tenant_id="acme",
    user_id="u-42",
    purpose="ops.alert",
    sources=frozenset({"ci"}),
    actions=frozenset({Action.EVALUATE}),
    until=NOW + timedelta(days=1),
)


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from(list(WatcherStatus)),
    statuses=st.lists(st.sampled_from(["failed", "passed"]), min_size=1, max_size=6),
    verdict=st.sampled_from([BudgetVerdict.OK, BudgetVerdict.EXHAUSTED]),
    skew=st.integers(min_value=-900, max_value=120),
    known=st.lists(st.integers(min_value=0, max_value=8), max_size=RECENT_TRIGGERS + 2),
    granted=st.booleans(),
    definition=st.sampled_from([DEFINITION, CHANGE]),
)
def test_what_evaluation_builds_unchecked_passes_the_checks(
    definition: WatcherDefinition,
    status: WatcherStatus,
    statuses: list[str],
    verdict: BudgetVerdict,
    skew: int,
    known: list[int],
    granted: bool,
) -> None:
    grants = (GRANT,) if granted else ()
    state = WatcherState(version=1, status=status, recent_triggers=[f"k{i}" for i in known])
    for n, text in enumerate(statuses):
        evidence = Evidence(
            source_kind=EvidenceKind.EVENT,
            source_id="ci",
            event_type="t",
            event_id=f"e-{n % 3}",
            observed_at=NOW + timedelta(seconds=skew),
            payload={"status": text},
            position=f"events:0:{n}",
        )
        now = NOW + timedelta(minutes=n)
        result = evaluate(definition, state, evidence, grants, now, recorded_budget(verdict))
        state = result.next_state
        assert type(state) is WatcherState
        assert WatcherState(*state) == state
        if state.checkpoint is not None:
            assert AppliedTrigger(*state.checkpoint) == state.checkpoint
