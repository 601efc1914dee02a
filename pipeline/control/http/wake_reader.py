"""The wakes of one subject, followed on the in-app ledger (seed 003's ``wake_session``).

Owns :class:`KafkaWakes` (a subject's ``notifications`` partition followed from its end, or just
after a recent position, yielding each ``wake`` as a :class:`Wake`: session and ledger position,
nothing of the notification; read committed, so a wake follows a durable notification),
:class:`WakeLimits` and :class:`StreamSlots`. Left out: the HTTP stream (``wakes``) and the ledger
(``backend``)."""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Final, Protocol

from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.tail import Tail
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.notification import NOTIFICATION, NotificationKind
from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import subject_key

__all__ = [
    "RESUME_WINDOW",
    "KafkaWakes",
    "StreamSlots",
    "Wake",
    "WakeFollower",
    "WakeLimits",
    "WakesPort",
]

RESUME_WINDOW: Final = 10_000
"""A client resumes after a position at most this many ledger records old; else from the end."""
_POSITION: Final = re.compile(r"notifications:(\d{1,6}):(\d{1,19})")


@dataclass(frozen=True, slots=True)
class Wake:
    """A content-free wake: which session, and where in the ledger."""

    session_id: str | None
    position: str


@dataclass(frozen=True, slots=True)
class WakeLimits:
    streams: int = 32  # open wake streams, all callers together
    per_principal: int = 2
    idle_s: float = 300.0  # a stream with no wake for this long ends
    heartbeat_s: float = 15.0


@dataclass(slots=True)
class StreamSlots:
    """Open wake streams, counted in total and per principal."""

    limits: WakeLimits = field(default_factory=WakeLimits)
    _open: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self, name: str) -> bool:
        with self._lock:
            if sum(self._open.values()) >= self.limits.streams:
                return False
            if self._open.get(name, 0) >= self.limits.per_principal:
                return False
            self._open[name] = self._open.get(name, 0) + 1
            return True

    def release(self, name: str) -> None:
        with self._lock:
            left = self._open.get(name, 0) - 1
            if left > 0:
                self._open[name] = left
            else:
                self._open.pop(name, None)


class WakeFollower(Protocol):
    def poll(self, timeout_s: float) -> list[Wake]: ...

    def close(self) -> None: ...


class WakesPort(Protocol):
    """What the wake route needs: a follower of one subject's wakes."""

    def follow(self, tenant_id: str, user_id: str, after: str | None) -> WakeFollower: ...


class _Follower:
    def __init__(self, tail: Tail, subject: bytes, partition: int, codec: AvroCodec):
        self._tail = tail
        self._subject = subject
        self._partition = partition
        self._codec = codec

    def poll(self, timeout_s: float) -> list[Wake]:
        found: list[Wake] = []
        for msg in self._tail.poll(timeout_s):
            raw = msg.value()
            if msg.key() != self._subject or raw is None:
                continue  # another subject's record in the same partition, or a tombstone
            try:
                record_type, value = self._codec.decode(raw)
            except (SerdeError, ValueError):
                continue
            if record_type != NOTIFICATION or value.get("kind") != NotificationKind.WAKE.value:
                continue
            position = f"notifications:{self._partition}:{msg.offset()}"
            found.append(Wake(value.get("session_id"), position))
        return found

    def close(self) -> None:
        self._tail.close()


class KafkaWakes:
    """Followers of subjects' wakes on ``notifications`` (no network until :meth:`follow`)."""

    def __init__(
        self, bootstrap: str, topology: Topology, *, codec: AvroCodec | None = None
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topology.name(Topic.NOTIFICATIONS)
        self._partitions = topology.partitions_for(Topic.NOTIFICATIONS)
        self._codec = codec or default_codec()

    def follow(self, tenant_id: str, user_id: str, after: str | None) -> WakeFollower:
        """Follow from the end of the subject's partition, or just after ``after`` (the last
        position the client saw, ``Last-Event-ID``) when it is of that partition and recent."""
        subject = subject_key(tenant_id, user_id)
        partition = partition_for(subject, self._partitions)
        tail = Tail(self._bootstrap, f"vigil-wakes-{uuid.uuid4().hex[:8]}", timeout_s=10.0)
        end = tail.follow(self._topic, partition)
        resume = _resume_offset(after, partition, end)
        if resume is not None:
            tail.follow(self._topic, partition, resume)
        return _Follower(tail, subject.encode("utf-8"), partition, self._codec)


def _resume_offset(after: str | None, partition: int, end: int) -> int | None:
    match = None if after is None or len(after) > 64 else _POSITION.fullmatch(after.strip())
    if match is None or int(match.group(1)) != partition:
        return None
    start = int(match.group(2)) + 1
    return start if end - RESUME_WINDOW <= start < end else None
