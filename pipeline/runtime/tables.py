"""Keyed in-memory tables backed by compacted topics, and the reader that fills them.

Owns :class:`Table` in three kinds (:class:`TableKind`: ``owned`` state written back in the
app's transaction, tagged with the input positions it reflects; ``external`` co-partitioned
topics another app writes; ``global`` whole topics) and :class:`TableReader`. Leaves out
transactions and the group (``app``) and values: keys are ``str``, values ``bytes``.
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from pipeline.kafka.admin import connect_admin
from pipeline.kafka.clients import (
    BrokerFailure,
    ErrorKind,
    classify,
    is_partition_eof,
    raise_for_message,
    ready_batch,
    retire,
    translate,
)
from pipeline.rules.errors import BrokerError

__all__ = [
    "OFFSETS_HEADER",
    "Table",
    "TableKind",
    "TableReader",
    "TableSpec",
    "decode_offsets",
    "encode_offsets",
]

OFFSETS_HEADER = "vigil.offsets"
_ABSENT = object()
Headers = dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None
_OFFSET_BEGINNING = -2


class TableKind(enum.Enum):
    """Who writes a table's topic and how much of it a member holds."""

    OWNED = "owned"  # this app's changelog, co-partitioned with the inputs
    EXTERNAL = "external"  # another app's compacted topic, co-partitioned with the inputs
    GLOBAL = "global"  # another app's compacted topic, read whole by every member


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table: its name for the processor, its topic, and its kind."""

    name: str
    topic: str
    kind: TableKind = TableKind.OWNED


@dataclass(slots=True)
class Table:
    """One partition of a table: a dict plus what changed since the last commit.

    ``undo`` holds each key's value before its first write in the open transaction, so an
    abort restores exactly what the aborted transaction touched.
    """

    spec: TableSpec
    partition: int
    data: dict[str, bytes] = field(default_factory=dict)
    undo: dict[str, object] = field(default_factory=dict)

    def get(self, key: str, default: bytes | None = None) -> bytes | None:
        return self.data.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def items(self) -> Iterable[tuple[str, bytes]]:
        return self.data.items()

    def set(self, key: str, value: bytes) -> None:
        self._remember(key)
        self.data[key] = value

    def delete(self, key: str) -> None:
        self._remember(key)
        self.data.pop(key, None)

    def dirty(self) -> Iterator[tuple[str, bytes | None]]:
        """Keys written since the last commit with their current value (None: deleted)."""
        for key in self.undo:
            yield key, self.data.get(key)

    def committed(self) -> None:
        self.undo.clear()

    def rollback(self) -> None:
        for key, before in self.undo.items():
            if before is _ABSENT:
                self.data.pop(key, None)
            else:
                assert isinstance(before, bytes)
                self.data[key] = before
        self.undo.clear()

    def apply(self, key: str, value: bytes | None) -> None:
        """Apply a record read from the topic (restore or tail): no undo, no write-back."""
        if value is None:
            self.data.pop(key, None)
        else:
            self.data[key] = value

    def _remember(self, key: str) -> None:
        if self.spec.kind is not TableKind.OWNED:
            raise BrokerError(f"table {self.spec.name!r} is read-only ({self.spec.kind.value})")
        if key not in self.undo:
            self.undo[key] = self.data.get(key, _ABSENT)


def encode_offsets(positions: dict[str, int]) -> bytes:
    """The ``vigil.offsets`` header: input topic → next offset, for one task partition."""
    return json.dumps(positions, separators=(",", ":"), sort_keys=True).encode()


def decode_offsets(raw: bytes | str | None) -> dict[str, int]:
    if raw is None:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise BrokerError(f"bad {OFFSETS_HEADER} header: {raw!r}")
    return {str(k): int(v) for k, v in value.items()}


class TableReader:
    """Reads table topics with ``assign()``: restores partitions and tails them to their end.

    One consumer serves every table of an app. "The end" is the last stable offset asked of the
    broker at catch-up time; a partition has reached it when its position or its last
    end-of-partition event is at or past it (markers take offsets, DESIGN.md §10).
    """

    def __init__(self, consumer_config: dict[str, Any], timeout_s: float = 30.0) -> None:
        self._config = consumer_config
        self._timeout_s = timeout_s
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None
        # Tailed partitions: (topic, partition) → the table it feeds.
        self._tailed: dict[tuple[str, int], Table] = {}
        self._reached: dict[tuple[str, int], int] = {}

    # -- restore -------------------------------------------------------------------------

    def restore(self, tables: dict[tuple[str, int], Table]) -> dict[int, dict[str, int]]:
        """Fill ``tables`` ((topic, partition) → table) from their start to their current end.

        Returns, per partition, the highest input positions the records carried in their
        ``vigil.offsets`` header (owned tables only).
        """
        by_tp = dict(tables)
        positions: dict[int, dict[str, int]] = {}
        if not by_tp:
            return positions
        consumer = self._reader()
        late = False
        try:
            consumer.assign([TopicPartition(tp, p, _OFFSET_BEGINNING) for tp, p in by_tp])
            pending = set(by_tp)
            deadline = time.monotonic() + self._timeout_s
            while pending:
                if time.monotonic() > deadline:
                    late = True
                    raise _late(f"restore of {sorted(pending)} did not reach the end")
                for msg in ready_batch(consumer, 1000, 0.2):
                    tp = (msg.topic() or "", msg.partition() or 0)
                    table = by_tp.get(tp)
                    if table is None or _passing(msg):  # left over, or the broker is away
                        continue
                    if is_partition_eof(msg):
                        pending.discard(tp)
                        self._reached[tp] = msg.offset() or 0
                        continue
                    raise_for_message(msg)
                    table.apply((msg.key() or b"").decode(), msg.value())
                    self._reached[tp] = (msg.offset() or 0) + 1
                    if table.spec.kind is TableKind.OWNED:
                        _merge(positions.setdefault(tp[1], {}), _offsets_of(msg.headers()))
        except KafkaException as exc:
            raise translate(exc, "restore") from exc
        finally:
            if late:
                self._retire(consumer)
            if self._tailed:
                self._reassign()
            elif not late:
                consumer.unassign()
        return positions

    # -- tail ----------------------------------------------------------------------------

    def tail(self, tables: dict[tuple[str, int], Table]) -> None:
        """Keep ``tables`` (read-only kinds) caught up, from where :meth:`restore` left them."""
        if tables:
            self._tailed.update(tables)
            self._reassign()

    def untail(self, partitions: Iterable[tuple[str, int]]) -> None:
        gone = [key for key in partitions if key in self._tailed]
        for key in gone:
            del self._tailed[key]
            self._reached.pop(key, None)
        if gone:
            self._reassign()

    def catch_up(self) -> None:
        """Read every tailed partition up to the broker's current last stable offset."""
        if not self._tailed:
            return
        targets = self._end_offsets(list(self._tailed))
        consumer = self._reader()
        deadline = time.monotonic() + self._timeout_s
        try:
            behind = self._behind(targets)
            while behind:
                if time.monotonic() > deadline:
                    self._retire(consumer)
                    self._reassign()
                    raise _late("tables did not catch up to their end in time")
                for msg in ready_batch(consumer, 1000, 0.05):
                    tp = (msg.topic() or "", msg.partition() or 0)
                    if _passing(msg):
                        continue
                    if is_partition_eof(msg):
                        self._reached[tp] = max(self._reached.get(tp, -1), msg.offset() or 0)
                        continue
                    raise_for_message(msg)
                    table = self._tailed.get(tp)
                    if table is not None:
                        table.apply((msg.key() or b"").decode(), msg.value())
                    self._reached[tp] = (msg.offset() or 0) + 1
                behind = self._behind(targets)
                if behind:
                    self._past_markers(consumer, behind)
                    behind = self._behind(targets)
        except KafkaException as exc:
            raise translate(exc, "table catch-up") from exc

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _behind(self, targets: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
        return [tp for tp, end in targets.items() if self._reached.get(tp, -1) < end]

    def _past_markers(self, consumer: Consumer, partitions: list[tuple[str, int]]) -> None:
        """Count as reached what the consumer's position has passed: a transaction's commit
        marker takes the last offset before the end, and librdkafka moves the position past
        it once every record before it was returned. Waiting for the end-of-partition event
        instead costs a whole empty fetch (``fetch.wait.max.ms``, 500 ms by default) per
        catch-up of a table whose writer commits transactions."""
        for found in consumer.position([TopicPartition(t, p) for t, p in partitions]):
            if found.error is None and found.offset >= 0:
                tp = (found.topic, found.partition)
                self._reached[tp] = max(self._reached.get(tp, -1), found.offset)

    # -- internals -----------------------------------------------------------------------

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._config)
        return self._consumer

    def _retire(self, consumer: Consumer) -> None:
        """A read that did not reach the end in time: the next read starts a new consumer. The
        broker may answer everything else while this one stays stuck on a connection a broker
        restart took away (librdkafka #5511; seen: a restore timing out for minutes after a
        restart while new producers were answered)."""
        if self._consumer is consumer:
            self._consumer = None
        retire(consumer)

    def _reassign(self) -> None:
        """Point the consumer at exactly the tailed partitions, each from where it was."""
        self._reader().assign(
            [
                TopicPartition(t, p, self._reached.get((t, p), _OFFSET_BEGINNING))
                for t, p in self._tailed
            ]
        )

    def _end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if self._admin is None:
            self._admin = connect_admin(self._config["bootstrap.servers"])
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): latest for t, p in partitions}
        try:
            futures = self._admin.list_offsets(
                request,
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=self._timeout_s,
            )
            return {
                (tp.topic, tp.partition): future.result(timeout=self._timeout_s + 5).offset
                for tp, future in futures.items()
            }
        except FutureTimeout:  # the client never answered its own request: start a new one
            self._admin = None
            raise BrokerFailure(
                "list offsets: no answer", code="_TIMED_OUT", kind=ErrorKind.RETRIABLE
            ) from None
        except KafkaException as exc:
            # A restarted broker answers a stale client FENCED_LEADER_EPOCH until its metadata
            # is fresh, and an admin client does not refresh on that answer: start a new one.
            self._admin = None
            raise translate(exc, "list offsets") from exc


def _passing(msg: Any) -> bool:
    """An error event of a broker that is away (librdkafka keeps retrying): not a record, and
    no reason to give up before the deadline."""
    error = msg.error()
    return (
        error is not None and not is_partition_eof(msg) and classify(error) is ErrorKind.RETRIABLE
    )


def _late(what: str) -> BrokerFailure:
    """A read that did not finish in time: the broker is slow or away, so try again later."""
    return BrokerFailure(what, code="_TIMED_OUT", kind=ErrorKind.RETRIABLE)


def _offsets_of(headers: Headers) -> dict[str, int]:
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in pairs:
        if name == OFFSETS_HEADER:
            return decode_offsets(value)
    return {}


def _merge(into: dict[str, int], more: dict[str, int]) -> None:
    for topic, offset in more.items():
        if offset > into.get(topic, -1):
            into[topic] = offset
