"""Following topics from their start for a long-lived reader outside a stream app (the API's
ledger index): read-committed, every partition, on a thread of its own.

Owns :class:`Follower`: each committed record handed to ``take`` in offset order (its exception
skips the record, never the reader), how far each partition is read, and waits for the first
catch-up or one partition's end (past the deadline: :class:`BrokerError`). Leaves out meaning.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from pipeline.kafka.clients import is_partition_eof, ready_batch, table_consumer
from pipeline.kafka.scan import partitions_of
from pipeline.rules.errors import BrokerError

__all__ = ["Follower"]

log = logging.getLogger(__name__)

_POLL_S: Final = 0.2
_RETRY_S: Final = 1.0


class Follower:
    """Every partition of ``topics`` from its start, each record to ``take``; no network until
    :meth:`start`."""

    def __init__(
        self, bootstrap: str, topics: Sequence[str], take: Callable[[Message], None], name: str
    ) -> None:
        self._bootstrap = bootstrap
        self._topics = tuple(topics)
        self._take = take
        self._name = name
        self._reached: dict[tuple[str, int], int] = {}
        self._caught_up = False
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe: Consumer | None = None
        self._probe_lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        with self._probe_lock:
            if self._probe is not None:
                self._probe.close()
                self._probe = None

    @property
    def ready(self) -> bool:
        """Whether every partition was read to its end once (no wait, no start)."""
        with self._lock:
            return self._caught_up

    def caught_up(self, timeout_s: float) -> float:
        """Wait until every partition was read to its end once (starting the reader); returns
        what is left of ``timeout_s``."""
        self.start()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._caught_up:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrokerError(f"{self._name} is still reading the log: try again")
                self._lock.wait(left)
        return deadline - time.monotonic()

    def sync(self, topic: str, partition: int, timeout_s: float) -> None:
        """Wait until ``topic[partition]`` is read to its end as the broker has it now (a
        transaction still open there is waited for only until the deadline)."""
        left = self.caught_up(timeout_s)
        end = self._end(topic, partition, max(left, 0.1))
        deadline = time.monotonic() + left
        with self._lock:
            while self._reached.get((topic, partition), 0) < end:
                wait = deadline - time.monotonic()
                if wait <= 0:
                    return  # what is committed so far
                self._lock.wait(wait)

    def _run(self) -> None:
        consumer = table_consumer(
            self._bootstrap, f"{self._name}-{uuid.uuid4().hex[:8]}", **{"fetch.wait.max.ms": 50}
        )
        try:
            pending = self._assign(consumer)
            while not self._stop.is_set():
                try:
                    batch = ready_batch(consumer, 1000, _POLL_S)
                except KafkaException as exc:
                    log.warning("%s: reading failed, retrying: %s", self._name, exc)
                    self._stop.wait(_RETRY_S)
                    continue
                for msg in batch:
                    self._handle(msg, pending)
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> set[tuple[str, int]]:
        while not self._stop.is_set():
            try:
                parts = [(t, p) for t in self._topics for p in partitions_of(consumer, t)]
            except BrokerError as exc:
                log.warning("%s: %s; retrying", self._name, exc)
                self._stop.wait(_RETRY_S)
                continue
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in parts])
            return set(parts)
        return set()

    def _handle(self, msg: Message, pending: set[tuple[str, int]]) -> None:
        where = (msg.topic() or "", msg.partition() or 0)
        if is_partition_eof(msg):
            self._advance(where, msg.offset() or 0)
            with self._lock:
                pending.discard(where)
                self._caught_up = self._caught_up or not pending
                self._lock.notify_all()
            return
        if msg.error() is not None:
            log.warning("%s: %s", self._name, msg.error())
            return
        try:
            self._take(msg)
        except Exception:  # one record's failure is that record's, never the reader's
            log.exception("%s: a record of %s[%d] was skipped", self._name, *where)
        self._advance(where, (msg.offset() or 0) + 1)

    def _advance(self, where: tuple[str, int], offset: int) -> None:
        with self._lock:
            self._reached[where] = max(self._reached.get(where, 0), offset)
            self._lock.notify_all()

    def _end(self, topic: str, partition: int, timeout_s: float) -> int:
        with self._probe_lock:
            if self._probe is None:
                self._probe = table_consumer(self._bootstrap, f"{self._name}-probe")
            try:
                _, high = self._probe.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout_s
                )
            except KafkaException as exc:
                raise BrokerError(f"find the end of {topic}[{partition}]: {exc}") from None
        return int(high)
