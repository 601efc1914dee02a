"""The API's ledger index: each subject's newest in-app records and deliveries, kept by one reader
tailing ``notifications`` and ``delivery-state`` (DESIGN.md §10 "Limits").

Owns :class:`LedgerIndex`, so a request reads its own subject's records and never scans a partition;
notifications stay sealed until a request opens them. Left out: opening and folding records
(``backend``) and who may read them (the routes)."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Final

from pipeline.kafka.follow import Follower
from pipeline.kafka.serde import AvroCodec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.delivery_state import DeliveryRecord, decode_record
from pipeline.rules.errors import SerdeError
from pipeline.rules.keys import subject_key
from pipeline.runtime.processing import Message

__all__ = ["DEFAULT_MAX_RECORDS", "DEFAULT_PER_SUBJECT", "LedgerIndex"]

DEFAULT_PER_SUBJECT: Final = 1_000
DEFAULT_MAX_RECORDS: Final = 200_000
_MAX_KEY: Final = 1024  # a subject key longer than any vigil writes is not filed


@dataclass(slots=True)
class _Subject:
    notes: deque[bytes]
    deliveries: OrderedDict[str, DeliveryRecord] = field(default_factory=OrderedDict)

    @property
    def size(self) -> int:
        return len(self.notes) + len(self.deliveries)


class LedgerIndex:
    """Per-subject notifications and deliveries; no network until the first read.

    A reader thread (``pipeline.kafka.follow.Follower``) reads both topics from their start,
    read-committed, filing a notification's raw value under its key and a ``delivery-state`` record
    under its subject (a tombstone removes it). Each subject keeps its newest ``per_subject`` of
    each, all together at most ``max_records`` (the subject written least recently goes first). A
    read waits, up to its deadline, for the first catch-up and for its partition's current end, so
    an acknowledgement is seen by the next request; a late reader is a :class:`BrokerError`
    (503)."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        codec: AvroCodec,
        *,
        per_subject: int = DEFAULT_PER_SUBJECT,
        max_records: int = DEFAULT_MAX_RECORDS,
    ) -> None:
        self._notes_topic = topology.name(Topic.NOTIFICATIONS)
        self._states_topic = topology.name(Topic.DELIVERY_STATE)
        self._codec = codec
        self._per_subject = per_subject
        self._max_records = max_records
        self._subjects: OrderedDict[str, _Subject] = OrderedDict()  # least recently written first
        self._owner: dict[str, str] = {}  # delivery key → subject key
        self._records = 0
        self._lock = threading.Lock()
        topics = (self._notes_topic, self._states_topic)
        self._follower = Follower(bootstrap, topics, self._file, "vigil-api-ledger-index")

    # -- reads -----------------------------------------------------------------------------

    def notifications(self, subject: str, partition: int, timeout_s: float) -> list[bytes]:
        """The subject's notification values, oldest first, once the reader has reached the
        end of its ``partition`` of ``notifications``."""
        self._follower.sync(self._notes_topic, partition, timeout_s)
        with self._lock:
            found = self._subjects.get(subject)
            return [] if found is None else list(found.notes)

    def deliveries(self, tenant_id: str, user_id: str, timeout_s: float) -> list[DeliveryRecord]:
        """The newest record of each of the subject's delivery keys (after the first
        catch-up)."""
        self._follower.caught_up(timeout_s)
        with self._lock:
            found = self._subjects.get(subject_key(tenant_id, user_id))
            return [] if found is None else list(found.deliveries.values())

    def delivery(
        self, tenant_id: str, user_id: str, key: str, partition: int, timeout_s: float
    ) -> DeliveryRecord | None:
        """The subject's record of ``key`` (None: no such key, or another subject's), once the
        reader has reached the end of its ``partition`` of ``delivery-state``."""
        self._follower.sync(self._states_topic, partition, timeout_s)
        with self._lock:
            found = self._subjects.get(subject_key(tenant_id, user_id))
            return None if found is None else found.deliveries.get(key)

    def ready(self) -> str | None:
        """None once the first catch-up is done, else what is still going on (the reader is
        started here: a readiness probe warms the index before the first request needs it)."""
        self._follower.start()
        return None if self._follower.ready else "the ledger index is still reading the log"

    def close(self) -> None:
        self._follower.close()

    # -- filing ----------------------------------------------------------------------------

    def _file(self, msg: Message) -> None:
        if msg.topic() == self._notes_topic:
            self._file_note(msg)
        else:
            self._file_state(msg)

    def _file_note(self, msg: Message) -> None:
        key, value = msg.key(), msg.value()
        if not key or value is None or len(key) > _MAX_KEY:
            return
        subject = key.decode("utf-8", "replace")
        with self._lock:
            found = self._touch(subject)
            if len(found.notes) == self._per_subject:
                self._records -= 1  # the deque drops its oldest
            found.notes.append(value)
            self._records += 1
            self._bound()

    def _file_state(self, msg: Message) -> None:
        key = (msg.key() or b"").decode("utf-8", "replace")
        raw = msg.value()
        record = None
        if raw is not None:
            try:
                record = decode_record(self._codec, raw)
            except (SerdeError, ValueError):
                record = None  # not a record of this key: the key is forgotten, as a scan did
            if record is not None and record.key != key:
                record = None
        with self._lock:
            self._forget(key)
            if record is None:
                return
            subject = subject_key(record.tenant_id, record.user_id)
            found = self._touch(subject)
            found.deliveries[key] = record
            self._owner[key] = subject
            self._records += 1
            while len(found.deliveries) > self._per_subject:
                oldest, _ = found.deliveries.popitem(last=False)
                self._owner.pop(oldest, None)
                self._records -= 1
            self._bound()

    def _touch(self, subject: str) -> _Subject:
        found = self._subjects.pop(subject, None)
        if found is None:
            found = _Subject(deque(maxlen=self._per_subject))
        self._subjects[subject] = found  # now the most recently written
        return found

    def _forget(self, key: str) -> None:
        subject = self._owner.pop(key, None)
        found = None if subject is None else self._subjects.get(subject)
        if found is not None and found.deliveries.pop(key, None) is not None:
            self._records -= 1

    def _bound(self) -> None:
        """All subjects together hold at most ``max_records``: the least recently written
        subject goes first (never the one just written, which holds at most its own bound)."""
        while self._records > self._max_records and len(self._subjects) > 1:
            _, dropped = self._subjects.popitem(last=False)
            for key in dropped.deliveries:
                self._owner.pop(key, None)
            self._records -= dropped.size
