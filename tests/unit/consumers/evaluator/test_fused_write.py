"""The evaluator's write side on either hot path: the same records, to the same topics, keys and
partitions, in the same order (``Evaluator._write``: one fused native call per batch on the
native path, the Python encoders otherwise); sealed fields opened with the ring (nonces differ)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from consumers.evaluator import fused
from consumers.evaluator.loop import Evaluator, _Task, table_specs
from consumers.evaluator.metrics import evaluator_metrics
from pipeline.crypto import KeyEncryptionKeys, generate_kek_text
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.records.receipt import decode_receipt
from pipeline.records.watcher import Watch
from pipeline.rules.budgets import BudgetCaps, BudgetVerdict
from pipeline.rules.data_keys import evidence_owner, subject_owner
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.keys import canonical_json, watcher_key
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.native import NATIVE
from pipeline.rules.watcher_state import WatcherState
from pipeline.runtime.processing import ProcessContext
from pipeline.runtime.state import TaskState
from pipeline.runtime.tables import Table, TableKind, TableReader, TableSpec
from tests.native import python_path
from tests.unit.consumers.evaluator.test_fast_paths import NOW, definition, event, grant

pytestmark = pytest.mark.unit

_TOPOLOGY = Topology("t.", 4)


def _evaluator() -> Evaluator:
    keks = KeyEncryptionKeys.parse(generate_kek_text("k"))
    made = Evaluator(
        _TOPOLOGY,
        None,  # type: ignore[arg-type]  # the budget gate is given: Redis is never asked
        BudgetCaps(window=timedelta(hours=1)),
        TaskState(table_specs(_TOPOLOGY), TableReader({}), lambda _topic: 4),  # never read
        keks=keks,
        metrics=evaluator_metrics(CollectorRegistry()),
    )
    made._ring.create(subject_owner("acme", "ann"), NOW)
    made._ring.create(evidence_owner("acme", "ann", "build-failed", 2), NOW)
    return made


def _written(evaluator: Evaluator) -> tuple[list[tuple[Any, ...]], dict[str, bytes], int]:
    """What ``_write`` produces for three decisions (two satisfied, one not): the records in
    order, the watcher-state table, and the outbox entries counted."""
    spec = definition()
    parts = ("acme", "ann", "build-failed")
    text = canonical_json(spec.to_json()).decode()
    watch = Watch(watcher_key(*parts), parts, "ci", "build", 2, 2, WatcherStatus.ACTIVE, None, text)
    state = WatcherState(version=2, status=WatcherStatus.ACTIVE)
    gate = recorded_budget(BudgetVerdict.OK)
    decided = []
    for event_id, status in (("b-1", "failed"), ("b-2", "ok"), ("b-3", "failed")):
        result = evaluate(watch.definition, state, event(event_id, status), [grant()], NOW, gate)
        decided.append((watch, state, result))
        state = result.next_state
    produced: list[tuple[Any, ...]] = []
    table = Table(TableSpec("watcher-state", "watcher-state", TableKind.OWNED), 0)
    ctx = ProcessContext(
        0,
        lambda topic, value, key, partition, **_: produced.append((topic, key, partition, value)),
        lambda _s: 0,
        lambda _name, _partition: table,
        lambda _topic, key: partition_for(key or b"", 4),
    )
    entries = evaluator._write(ctx, _Task(None, table), decided, NOW)  # type: ignore[arg-type]
    return produced, dict(table.data), entries


def _opened(evaluator: Evaluator, produced: list[tuple[Any, ...]]) -> list[Any]:
    codec, ring = evaluator.codec, evaluator._ring
    receipts, outbox = _TOPOLOGY.name(Topic.RECEIPTS), _TOPOLOGY.name(Topic.OUTBOX)
    opened = []
    for topic, key, partition, value in produced:
        if topic == receipts:
            record: Any = decode_receipt(codec, ring, value)
        elif topic == outbox:
            record = decode_outbox_entry(codec, ring, value)
        else:
            record = value
        opened.append((topic, key, partition, record))
    return opened


def test_the_fused_write_produces_what_the_python_path_produces() -> None:
    evaluator = _evaluator()
    if NATIVE is not None:
        assert evaluator._fused is not None
    native, native_states, native_entries = _written(evaluator)
    with python_path(fused):
        python_evaluator = _evaluator()
        assert python_evaluator._fused is None
    python_evaluator._ring = evaluator._ring  # the same keys, so both open with one ring
    python, python_states, python_entries = _written(python_evaluator)
    assert native_entries == python_entries == 2
    assert native_states == python_states
    assert [(t, k, p) for t, k, p, _ in native] == [(t, k, p) for t, k, p, _ in python]
    assert _opened(evaluator, native) == _opened(evaluator, python)
    receipts = [r for t, _, _, r in _opened(evaluator, native) if t.endswith("receipts")]
    assert len(receipts) == 3 and not any(r[0].erased for r in receipts)
