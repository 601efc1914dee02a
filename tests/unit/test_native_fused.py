"""The evaluator's fused write step (``consumers.evaluator.fused``) writes what the Python
encoders write, byte for byte (DESIGN.md §10 "Compiled hot path"): the watcher-state, receipt
and outbox entry of typed records, valid and hostile (deep nesting, large documents, integers
past 2^53, non-finite floats, lone surrogates as invalid UTF-8 decodes to them), sealed under a
key ring's keys with one fixed nonce on both sides; what it does not write comes back None, and
the Python path then writes it or raises; an error the key ring raises stands on both paths."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from consumers.evaluator import fused
from consumers.evaluator.fused import FusedItem, FusedWrites, encoded
from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text, ring
from pipeline.kafka import writers
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.records.data_key import encode_data_key
from pipeline.rules import condition, keys
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps, BudgetVerdict
from pipeline.rules.data_keys import KeyOwner, evidence_owner, subject_owner
from pipeline.rules.errors import ConfigError
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.native import NATIVE
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode, Outcome, Reason
from pipeline.rules.quiet_hours import QuietHours
from pipeline.rules.receipts import Receipt
from pipeline.rules.watcher_state import AppliedTrigger, WatcherState
from tests.native import needs_native, python_path
from tests.unit.test_native import _JSON, _TEXT, _nested

pytestmark = [pytest.mark.unit, needs_native]

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NONCE = bytes(range(12))
_KEKS = KeyEncryptionKeys.parse(generate_kek_text("k1"))


def _ring() -> KeyRing:
    """A native key ring with keys for acme's subject and its watcher w's versions 1 and 2."""
    made = KeyRing(_KEKS, default_codec())
    for owner in (
        subject_owner("acme", "ann"),
        evidence_owner("acme", "ann", "w", 1),
        evidence_owner("acme", "ann", "w", 2),
    ):
        made.create(owner, NOW)
    return made


_RING = _ring()


class _FixedNonce:
    """Seals as the ring would, with the one nonce the fused step is handed."""

    def __init__(self, sealer_ring: KeyRing) -> None:
        self._ring = sealer_ring

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        cipher = self._ring.sealing_cipher(owner)
        return None if cipher is None else bytes(cipher.seal(plaintext, aad, NONCE))

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        return self._ring.open(aad, sealed)


@functools.cache
def _python_codec() -> AvroCodec:
    with python_path(writers):
        return AvroCodec.from_package()


def _python(item: FusedItem, sealer_ring: KeyRing = _RING) -> Any:
    """The Python path's bytes of ``item`` (its encoders, the Python writers), or the type of
    what it raised."""
    codec = _python_codec()
    with python_path(keys, condition, writers, fused):
        try:
            return encoded(codec, _FixedNonce(sealer_ring), item, NOW)
        except Exception as exc:
            return type(exc)


def _native(items: list[FusedItem], sealer_ring: KeyRing = _RING) -> list[Any]:
    step = FusedWrites.of(default_codec(), sealer_ring)
    assert step is not None
    return step.write(items, NOW, NONCE)


_INSTANTS = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
_PLAIN_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
_PLAIN_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _PLAIN_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_PLAIN_TEXT, inner, max_size=3),
    max_leaves=10,
)


@st.composite
def _items(draw: st.DrawFn) -> FusedItem:
    """An evaluation's records; half of them hostile somewhere (any text may hold a lone
    surrogate, any JSON value a non-finite float or an integer past 2^53, the version a long's
    overflow), the other half plain."""
    hostile = draw(st.booleans())
    text = _TEXT if hostile else _PLAIN_TEXT
    json = (_JSON | _PLAIN_JSON) if hostile else _PLAIN_JSON
    triggers: st.SearchStrategy[Any] = st.dictionaries(text, text, max_size=3) | st.dictionaries(
        text, json, max_size=2
    )  # a receipt's trigger is strings; a hostile one holds any JSON
    payloads = st.none() | st.dictionaries(text, json, max_size=4)
    maybe_text = st.none() | text
    tenants = st.sampled_from(["acme", "beta"]) | text  # acme has keys (_ring)
    tenant = draw(tenants)
    user = draw(st.sampled_from(["ann", "bob"]) | text)
    watcher = draw(st.sampled_from(["w", "v"]))
    versions = st.integers(0, 2**63 + 5) if hostile else st.integers(0, 2**40)
    version = draw(st.sampled_from([1, 2, 3]) | versions)
    trigger_key = draw(st.sampled_from(["k1", "k2"]) | text)
    evaluated_at = draw(_INSTANTS)
    receipt = Receipt(
        tenant_id=tenant,
        user_id=user,
        watcher_id=watcher,
        watcher_version=version,
        evaluated_at=evaluated_at,
        evidence_digest=draw(text),
        trigger=draw(triggers),
        trigger_key=trigger_key,
        observed_at=draw(_INSTANTS),
        position=draw(maybe_text),
        outcome=draw(st.sampled_from(Outcome)),
        reason=draw(st.sampled_from(Reason)),
        authorized=draw(st.none() | st.booleans()),
        authorization=draw(text),
        budget=draw(st.none() | st.sampled_from(BudgetVerdict)),
        tool_error=draw(st.none() | st.sampled_from(ErrorCode)),
        payload=draw(payloads),
        delivery_key=draw(maybe_text),
        note=draw(text),
    )
    state = None
    if draw(st.booleans()):
        checkpoint = None
        if draw(st.booleans()):
            checkpoint = AppliedTrigger(
                draw(st.sampled_from([trigger_key, "other"])),
                draw(st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]))),
                draw(_INSTANTS),
                draw(st.none() | st.just("events:0:1")),
            )
        state = WatcherState(
            version=draw(st.integers(0, 2**40)),
            status=draw(st.sampled_from(WatcherStatus)),
            activated_at=draw(st.none() | _INSTANTS),
            checkpoint=checkpoint,
            recent_triggers=draw(st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=3)),
            last_outcome=draw(st.none() | st.sampled_from(Outcome)),
            last_reason=draw(st.none() | st.sampled_from(Reason)),
            evaluations=draw(st.integers(0, 2**40)),
            revision=draw(st.integers(0, 10)),
            holds=draw(st.none() | st.booleans()),
            notified_at=draw(st.none() | _INSTANTS),
        )
    entry = None
    if draw(st.booleans()):
        entry = OutboxEntry(
            delivery_key=draw(st.sampled_from(["d1", "d2"]) | text),
            tenant_id=draw(tenants),
            user_id=draw(st.sampled_from(["ann", "bob"])),
            watcher_id=watcher,
            watcher_version=draw(st.integers(1, 3)),
            source_id="ci",
            purpose=draw(text),
            trigger=draw(triggers),
            outcome=draw(st.sampled_from(Outcome)),
            verb=draw(st.sampled_from(["notify", "call"])),
            target=draw(text),
            text=draw(maybe_text),
            message=draw(maybe_text),
            args=draw(st.none() | st.lists(text, max_size=3).map(tuple)),
            evidence_digest=draw(maybe_text),
            evidence_observed_at=draw(st.none() | _INSTANTS),
            due_at=draw(_INSTANTS),
            late=draw(st.booleans()),
            created_at=draw(_INSTANTS),
            retry=draw(
                st.sampled_from(
                    [RetryPolicy(), RetryPolicy(max_attempts=3, base=timedelta(seconds=1))]
                )
            ),
            quiet_hours=draw(
                st.none() | st.just(QuietHours(start="22:00", end="07:00", timezone="UTC"))
            ),
            budgets=draw(
                st.none()
                | st.just(BudgetCaps(window=timedelta(hours=1), evaluations=10, tokens=2**40))
            ),
            delivery_retention=draw(st.sampled_from([timedelta(days=7), timedelta(0)])),
            wake_session=draw(st.booleans()),
            session_id=draw(maybe_text),
            schedule_name=draw(maybe_text),
            schedule_time=draw(st.none() | _INSTANTS),
        )
    retention = draw(st.sampled_from([timedelta(days=30), timedelta(0), timedelta.max]))
    return (tenant, user, watcher), "ci", receipt, state, entry, retention


def _same(item: FusedItem, native: Any) -> str:
    """The fused answer is the Python path's bytes, or None where that path writes it (and
    always None where that path raises); says which."""
    python = _python(item)
    if isinstance(python, type):
        assert native is None, python
        return "the Python path raises"
    if native is not None:
        assert tuple(native) == python
        return "written natively"
    return "left to the Python path, which writes it"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_items(), min_size=1, max_size=4))
def test_the_fused_step_writes_the_python_paths_bytes(items: list[FusedItem]) -> None:
    answers = _native(items)
    assert len(answers) == len(items)
    for item, native in zip(items, answers, strict=True):
        event(_same(item, native))


def _plain(payload: Any = None, trigger: Any = None, **entry: Any) -> FusedItem:
    receipt = Receipt(
        tenant_id="acme",
        user_id="ann",
        watcher_id="w",
        watcher_version=1,
        evaluated_at=NOW,
        evidence_digest="d" * 64,
        trigger={"kind": "event", "event_id": "e1"} if trigger is None else trigger,
        trigger_key="k1",
        observed_at=NOW,
        position="events:0:7",
        outcome=Outcome.SATISFIED,
        reason=Reason.CONDITION_TRUE,
        authorized=True,
        budget=BudgetVerdict.OK,
        payload={"a": 1} if payload is None else payload,
        delivery_key="dk",
    )
    outbox = OutboxEntry(
        delivery_key="dk",
        tenant_id="acme",
        user_id="ann",
        watcher_id="w",
        watcher_version=1,
        source_id="ci",
        purpose="ops.alert",
        trigger=receipt.trigger,
        outcome=Outcome.SATISFIED,
        verb="notify",
        target="ops-hook",
        due_at=NOW,
        created_at=NOW,
        retry=RetryPolicy(),
        delivery_retention=timedelta(days=7),
        **entry,
    )
    checkpoint = AppliedTrigger("k1", {"kind": "event", "event_id": "e1"}, NOW, "events:0:7")
    state = WatcherState(1, WatcherStatus.ACTIVE, NOW, checkpoint, ("k1",), evaluations=3)
    return ("acme", "ann", "w"), "ci", receipt, state, outbox, timedelta(days=30)


def test_a_plain_evaluation_is_written_natively_and_sealed_under_the_rings_keys() -> None:
    item = _plain(text="hi", message="hello", args=("a", "b"))
    (native,) = _native([item])
    assert native is not None
    assert tuple(native) == _python(item)
    state, receipt, entry = native
    assert state is not None and entry is not None
    # random nonces without the test's: the values still open with the ring
    step = FusedWrites.of(default_codec(), _RING)
    assert step is not None
    (fresh,) = step.write([item], NOW)
    assert fresh is not None and fresh[1] != receipt and len(fresh[1]) == len(receipt)


def test_an_owner_without_a_key_is_written_withheld_on_both_paths() -> None:
    item = _plain()
    parts, source, receipt, state, entry, retention = item
    other = receipt._replace(tenant_id="nokey")
    moved: FusedItem = (parts, source, other, state, entry, retention)
    (native,) = _native([moved])
    assert native is not None and tuple(native) == _python(moved)


class _OtherReceipt(Receipt):
    """A receipt of another class: the fused step reads Receipt's own fields by position only."""

    __slots__ = ()


def test_records_of_another_class_are_left_to_the_python_path() -> None:
    item = _plain(text="hi")
    parts, source, receipt, state, entry, retention = item
    other: FusedItem = (parts, source, _OtherReceipt(*receipt), state, entry, retention)
    plain, left = _native([item, other])
    assert plain is not None and tuple(plain) == _python(item)
    assert left is None and _python(other) == tuple(plain)  # the Python path: the same bytes


@pytest.mark.parametrize(
    "payload",
    [
        _nested(300),
        {"big": 2**53},
        {"huge": 2**70},
        {"nan": float("nan")},
        {"inf": float("-inf")},
        {"lone": "\ud800"},
        {"\udfff": 1},
        {"large": "x" * 2_000_000},
        {"float": 0.1, "exp": 1e21},
    ],
)
def test_hostile_payloads_are_left_to_the_python_path_or_written_as_it_writes(
    payload: Any,
) -> None:
    item = _plain(payload=payload if isinstance(payload, dict) else {"deep": payload})
    (native,) = _native([item])
    _same(item, native)


def test_hostile_triggers_text_and_args_are_left_or_written_as_the_python_path() -> None:
    for item in (
        _plain(trigger={"kind": "\ud800"}),
        _plain(trigger={"n": float("nan")}),
        _plain(text="\udc80"),
        _plain(message="\ud800"),
        _plain(args=("\ud800",)),
    ):
        (native,) = _native([item])
        assert native is None
        assert isinstance(_python(item), type)


def test_a_key_this_process_cannot_unwrap_is_a_config_error_on_both_paths() -> None:
    keks = KeyEncryptionKeys.parse(generate_kek_text("k2"))
    stranger = KeyRing(keks, default_codec())
    for record in _RING:
        stranger.apply(record.owner.topic_key, _raw(record.owner))
    item = _plain()
    with pytest.raises(ConfigError):
        _native([item], stranger)
    assert _python(item, stranger) is ConfigError


def _raw(owner: KeyOwner) -> bytes:
    record = _RING.record(owner)
    assert record is not None
    return encode_data_key(default_codec(), record)


def test_the_python_path_has_no_fused_step() -> None:
    with python_path(fused):
        assert FusedWrites.of(default_codec(), _RING) is None
    assert NATIVE is not None
    assert ring is not None  # the ring module is the one the fused step's ciphers come from


def test_a_shredded_key_is_not_sealed_under_from_the_next_batch_on() -> None:
    own = _ring()
    step = FusedWrites.of(default_codec(), own)
    assert step is not None
    item = _plain()
    (before,) = step.write([item], NOW, NONCE)
    assert before is not None and tuple(before) == _python(item, own)
    own.apply(evidence_owner("acme", "ann", "w", 1).topic_key, None)  # the version's key shredded
    (after,) = step.write([item], NOW, NONCE)
    assert after is not None and tuple(after) == _python(item, own)
    assert after[1] != before[1] and after[2] == before[2]  # the receipt withheld, not the entry
