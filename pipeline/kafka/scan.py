"""Bounded scans of topics for operators: by time or by offsets, read-committed, with progress.

Owns :class:`Bound`, :func:`scan` (every committed record of one topic between two bounds, or
the newest ``tail`` of them, ending at the end offsets taken when it starts; a moving leader
waited out up to :data:`~pipeline.kafka.failover.FAILOVER_WAIT_S`) and :class:`Progress`.
Leaves out decoding records (callers) and what they mean.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Final, TextIO

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from pipeline.kafka.clients import (
    ErrorKind,
    classify,
    is_partition_eof,
    ready_batch,
    table_consumer,
    translate,
)
from pipeline.kafka.failover import FAILOVER_WAIT_S, ride_out, topic_metadata
from pipeline.rules.errors import BrokerError, ConfigError, DefinitionError
from pipeline.rules.instants import parse_instant, utc

__all__ = ["Bound", "Progress", "partitions_of", "scan"]

_OFFSETS: Final = re.compile(r"^[A-Za-z0-9._-]+:\d+:\d+(,[A-Za-z0-9._-]+:\d+:\d+)*$")
_EARLIEST: Final = -2
_META_TIMEOUT_S: Final = 10.0
_ASK_S: Final = 2.0  # one watermark request; a leader move is waited out by asking again
_IDLE_LIMIT_S: Final = FAILOVER_WAIT_S  # a partition whose leader moves reads nothing a while


@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a range. ``offsets`` maps (short topic name, partition) to an offset. When
    either end names offsets, only the partitions named by one end or the other are read (a
    partition named by one end only is unbounded at the other)."""

    instant: datetime | None = None
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    latest: bool = False

    @classmethod
    def parse(cls, text: str | None, *, end: bool) -> Bound:
        """``None`` is the topic's start (``end=False``) or its end (``end=True``)."""
        if text is None or text == ("latest" if end else "earliest"):
            return cls(latest=end)
        if text in ("earliest", "latest"):
            return cls(latest=text == "latest")
        if _OFFSETS.fullmatch(text):
            offsets: dict[tuple[str, int], int] = {}
            for part in text.split(","):
                topic, partition, offset = part.rsplit(":", 2)
                offsets[(topic, int(partition))] = int(offset)
            return cls(offsets=offsets, latest=end)
        try:
            return cls(instant=parse_instant(text, "range"))
        except DefinitionError as exc:
            raise ConfigError(
                f"{text!r} is not earliest, latest, an RFC 3339 instant or "
                "offsets like events:0:100,events:1:80"
            ) from exc

    def offset_for(self, short: str, partition: int) -> int | None:
        return self.offsets.get((short, partition))


class Progress:
    """A progress line: rewritten in place on a terminal, one line per topic otherwise."""

    def __init__(self, label: str, stream: TextIO | None = None, every_s: float = 0.25) -> None:
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()
        self._every = every_s
        self._last = 0.0
        self._what = ""

    def update(self, what: str, done: int, total: int | None = None) -> None:
        if not self._tty:
            if what != self._what:
                self._what = what
                size = f" ({total} records)" if total else ""
                self._stream.write(f"{self._label}: reading {what}{size}\n")
                self._stream.flush()
            return
        now = time.monotonic()
        if now - self._last < self._every:
            return
        self._last = now
        self._what = what
        tail = f"{done}/{total}" if total else f"{done}"
        self._stream.write(f"\r{self._label}: reading {what} {tail} records\x1b[K")
        self._stream.flush()

    def done(self, summary: str) -> None:
        prefix = "\r" if self._tty and self._what else ""
        clear = "\x1b[K" if self._tty else ""
        self._stream.write(f"{prefix}{self._label}: {summary}{clear}\n")
        self._stream.flush()


def partitions_of(consumer: Consumer, topic: str) -> list[int]:
    """``topic``'s partitions; a leader move is waited out (:data:`FAILOVER_WAIT_S`), and
    "create the topics" said only when the broker does not know the topic."""

    deadline = time.monotonic() + FAILOVER_WAIT_S
    listed = partial(consumer.list_topics, timeout=_META_TIMEOUT_S)
    metadata = topic_metadata(listed, topic, deadline)
    if metadata is None:
        raise BrokerError(f"topic {topic} is missing: run `vigil topics create`")
    return sorted(metadata.partitions)


def _watermarks(consumer: Consumer, topic: str, partition: int) -> tuple[int, int]:
    """A partition's low and high offsets; "not leader" (a topic just made, a broker moving
    leadership) is waited out (:data:`FAILOVER_WAIT_S`) with fresh metadata between tries."""
    tp = TopicPartition(topic, partition)
    asked = 0

    def ask() -> tuple[int, int]:
        nonlocal asked
        asked += 1
        if asked > 1:  # what moved: the client learns the new leader from fresh metadata
            consumer.list_topics(topic, timeout=_ASK_S)
        low, high = consumer.get_watermark_offsets(tp, timeout=_ASK_S)
        return int(low), int(high)

    what = f"find the ends of {topic}[{partition}]"
    return ride_out(ask, what, time.monotonic() + FAILOVER_WAIT_S)


def _start_offset(
    consumer: Consumer, topic: str, partition: int, bound: Bound, short: str, high: int
) -> int:
    named = bound.offset_for(short, partition)
    if named is not None:
        return named
    if bound.instant is not None:
        found = _offset_at(consumer, topic, partition, bound.instant)
        return high if found < 0 else found  # nothing that late yet: an empty range
    return _EARLIEST


def _end_offset(
    consumer: Consumer, topic: str, partition: int, bound: Bound, short: str, high: int
) -> int:
    named = bound.offset_for(short, partition)
    if named is not None:
        return min(named, high)
    if bound.instant is not None:
        found = _offset_at(consumer, topic, partition, bound.instant)
        return high if found < 0 else min(found, high)
    return high


def _offset_at(consumer: Consumer, topic: str, partition: int, instant: datetime) -> int:
    """The first offset whose timestamp is at or after ``instant`` (-1: none yet)."""
    millis = int(utc(instant).timestamp() * 1000)
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, partition, millis)], timeout=_META_TIMEOUT_S
        )
    except KafkaException as exc:
        raise translate(exc, f"look up offsets of {topic}") from exc
    return int(found[0].offset)


def scan(
    bootstrap: str,
    topic: str,
    *,
    start: Bound | None = None,
    end: Bound | None = None,
    short: str = "",
    partitions: Collection[int] | None = None,
    progress: Progress | None = None,
    tail: int | None = None,
) -> Iterator[Message]:
    """Every committed record of ``topic`` in ``[start, end)`` (of ``partitions`` only, when
    given), each partition's records in offset order; with ``tail``, only the last ``tail``
    offsets of each partition's range (a bounded read: the newest records)."""
    start = start or Bound()
    end = end or Bound(latest=True)
    short = short or topic
    # A short fetch wait: an idle partition's end is known sooner (the broker holds an empty
    # fetch for fetch.wait.max.ms, 500 by default, before it reports the end).
    consumer = table_consumer(
        bootstrap, f"vigil-scan-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 10}
    )
    try:
        ranges: dict[int, tuple[int, int]] = {}
        total = 0
        named = {*start.offsets, *end.offsets}
        for partition in partitions_of(consumer, topic):
            if named and (short, partition) not in named:
                continue
            if partitions is not None and partition not in partitions:
                continue
            low, high = _watermarks(consumer, topic, partition)
            first = _start_offset(consumer, topic, partition, start, short, high)
            first = low if first < 0 else max(first, low)
            last = _end_offset(consumer, topic, partition, end, short, high)
            if tail is not None:
                first = max(first, last - tail)
            if first < last:
                ranges[partition] = (first, last)
                total += last - first
        if not ranges:
            return
        consumer.assign([TopicPartition(topic, p, first) for p, (first, _) in ranges.items()])
        yield from _drain(consumer, topic, ranges, total, progress)
    finally:
        consumer.close()


def _drain(
    consumer: Consumer,
    topic: str,
    ranges: dict[int, tuple[int, int]],
    total: int,
    progress: Progress | None,
) -> Iterator[Message]:
    open_parts = set(ranges)
    seen = 0
    idle_since = time.monotonic()
    while open_parts:
        batch = ready_batch(consumer, 1000, 0.5)
        if not batch:
            if time.monotonic() - idle_since > _IDLE_LIMIT_S:
                raise BrokerError(f"reading {topic} stalled before its end offsets")
            continue
        idle_since = time.monotonic()
        for msg in batch:
            partition = msg.partition() or 0
            if is_partition_eof(msg):  # nothing committed is left (markers take offsets)
                open_parts.discard(partition)
                continue
            error = msg.error()
            if error is not None:
                if classify(error) is ErrorKind.RETRIABLE:  # a broker away: the client retries
                    continue
                raise BrokerError(f"reading {topic}: {error.str()}")
            if partition not in open_parts:
                continue
            offset = msg.offset() or 0
            last = ranges[partition][1]
            if offset >= last:
                open_parts.discard(partition)
                continue
            seen += 1
            if progress is not None:
                progress.update(topic, seen, total)
            yield msg
            if offset + 1 >= last:
                open_parts.discard(partition)
