"""The ticker's records: ticks as the evaluator reads them, ticker-state memories and states."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.kafka.serde import default_codec
from pipeline.records.tick import TickRecord, encode_tick, evidence_from_tick
from pipeline.records.ticker_state import decode_ticker_state, encode_memory, encode_pinned
from pipeline.rules.data_keys import evidence_owner
from pipeline.rules.errors import ErasedError, SerdeError
from pipeline.rules.evidence import EvidenceKind
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.outcomes import ErrorCode
from pipeline.rules.ticker import TickerMemory, TickKind
from producers.ticker.tools.pinned import state_from_event
from tests.keyring import ring_with

pytestmark = pytest.mark.unit

CODEC = default_codec()
AT = datetime(2026, 11, 29, 10, 5, tzinfo=UTC)
SEEN = datetime(2026, 11, 29, 10, 5, 1, 250_000, tzinfo=UTC)


def test_poll_tick_reads_back_as_evidence_naming_its_watcher() -> None:
    tick = TickRecord(
        TickKind.POLL,
        "acme",
        "u-1",
        "w-1",
        3,
        "run:r-1",
        AT,
        SEEN,
        payload={"status": "running", "n": 1},
        usage_tokens=7,
        usage_micro_usd=12,
    )
    ring = ring_with(evidence_owner("acme", "u-1", "w-1", 3))
    raw = encode_tick(CODEC, ring, tick)
    record_type, value = CODEC.decode(raw)
    assert record_type == "tick" and value["payload"] is None and b"running" not in raw
    evidence = evidence_from_tick(value, "ticks:0:1", ring)
    assert evidence.payload == {"n": 1, "status": "running"}
    assert evidence.source_kind is EvidenceKind.POLL
    assert evidence.watcher_key == ("acme", "u-1", "w-1")
    assert (evidence.scheduled_at, evidence.observed_at) == (AT, SEEN)
    assert (evidence.tokens, evidence.micro_usd) == (7, 12)
    assert value["watcher_version"] == 3


def test_failed_and_late_ticks_carry_code_and_flag_without_payload() -> None:
    failed = TickRecord(
        TickKind.POLL, "acme", "u-1", "w-1", 1, "status.a", AT, SEEN, tool_error=ErrorCode.REJECTED
    )
    late = TickRecord(
        TickKind.SCHEDULE, "acme", "u-1", "w-2", 1, "schedule:me", AT, SEEN, late=True
    )
    ring = ring_with()
    _, failed_value = CODEC.decode(encode_tick(CODEC, ring, failed))
    _, late_value = CODEC.decode(encode_tick(CODEC, ring, late))
    assert (failed_value["payload"], failed_value["tool_error"]) == (None, "rejected")
    assert failed_value["sealed"] is None, "no payload, nothing to seal"
    assert evidence_from_tick(late_value, "p", ring).late is True


def test_a_tick_whose_key_is_shredded_is_erased_never_an_empty_payload() -> None:
    owner = evidence_owner("acme", "u-1", "w-1", 3)
    ring = ring_with(owner)
    tick = TickRecord(TickKind.POLL, "acme", "u-1", "w-1", 3, "s", AT, SEEN, payload={"a": 1})
    _, value = CODEC.decode(encode_tick(CODEC, ring, tick))
    ring.apply(owner.topic_key, None)  # cancel shreds the watcher's evidence key
    with pytest.raises(ErasedError):
        evidence_from_tick(value, "ticks:0:1", ring)


def test_a_tick_written_without_its_key_keeps_no_payload() -> None:
    tick = TickRecord(TickKind.POLL, "acme", "u-1", "w-1", 3, "s", AT, SEEN, payload={"a": 1})
    raw = encode_tick(CODEC, ring_with(), tick)
    _, value = CODEC.decode(raw)
    assert value["sealed"] == b"" and value["payload"] is None and b'"a"' not in raw
    with pytest.raises(ErasedError):
        evidence_from_tick(value, "ticks:0:1", ring_with())


def test_memory_and_pinned_state_round_trip_through_ticker_state() -> None:
    memory = TickerMemory(2, WatcherStatus.PAUSED, AT, final_done=True, expiry_done=True)
    data = encode_memory(CODEC, ("acme", "u-1", "w-1"), "run:r-1", memory, SEEN)
    assert decode_ticker_state(CODEC, data) == memory
    payload = {"tenant_id": "acme", "run_id": "r-1", "status": "failed"}
    state = state_from_event("workflow.run.status", "acme", "run:r-1", "e-9", SEEN, payload)
    assert state is not None
    assert decode_ticker_state(CODEC, encode_pinned(CODEC, state)) == state


def test_ticker_state_with_both_or_neither_part_is_undecodable() -> None:
    neither = CODEC.encode("ticker_state", {"watcher": None, "pinned": None})
    with pytest.raises(SerdeError):
        decode_ticker_state(CODEC, neither)
