"""Reading what replay needs from the topics: a :class:`~pipeline.rules.replay.History`.

Owns :func:`read_history` (``definition-log`` and ``watchers`` whole, ``events`` and ``ticks``
within the range, ``receipts`` up to now, the latest ``outbox`` per key; a progress line on stderr)
and :class:`Scope`. Sealed fields open with the ``keys`` topic as the read starts; shredded ones are
marked erased. Leaves out the rules and the command line."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.scan import Bound, Progress, scan
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.definition_log import decode_definition_log
from pipeline.records.event import evidence_from_event
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.records.receipt import decode_receipt
from pipeline.records.sealing import Sealer
from pipeline.records.tick import evidence_from_tick
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError, ErasedError, SerdeError
from pipeline.rules.evidence import position_of
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.receipts import Receipt
from pipeline.rules.replay_model import DefinitionVersion, History, ReplayInput
from pipeline.runtime.keys import read_keys

__all__ = ["Scope", "key_ring", "read_history", "read_receipts"]

log = logging.getLogger(__name__)

VersionKey = tuple[str, str, str, int]


@dataclass(frozen=True, slots=True)
class Scope:
    """Which watchers to read: all, one subject's, or one watcher."""

    tenant_id: str | None = None
    user_id: str | None = None
    watcher_id: str | None = None

    @classmethod
    def parse(cls, watcher: str | None, subject: str | None) -> Scope:
        """``--watcher`` is a watcher id or a watcher key ``["t","u","w"]``; ``--subject`` is
        ``tenant/user`` or a subject key ``["t","u"]``."""
        tenant = user = None
        if subject is not None:
            if subject.startswith("["):
                tenant, user = _key_array(subject, 2, "subject")
            else:
                tenant, sep, user = subject.partition("/")
                if not sep or not tenant or not user:
                    raise DefinitionError('a subject is tenant/user or ["t","u"]', "subject")
        if watcher is not None and watcher.startswith("["):
            tenant, user, watcher = _key_array(watcher, 3, "watcher")
        return cls(tenant, user, watcher)

    def covers(self, tenant_id: str, user_id: str, watcher_id: str) -> bool:
        return (
            (self.tenant_id is None or self.tenant_id == tenant_id)
            and (self.user_id is None or self.user_id == user_id)
            and (self.watcher_id is None or self.watcher_id == watcher_id)
        )


def _key_array(text: str, size: int, field: str) -> tuple[str, ...]:
    """A key written as a JSON array of ids (any spacing: people type these)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, list) or len(value) != size:
        raise DefinitionError(f"a {field} key is a JSON array of {size} strings", field)
    if not all(isinstance(part, str) and part for part in value):
        raise DefinitionError(f"a {field} key is a JSON array of {size} strings", field)
    return tuple(value)


def _topic(topology: Topology, topic: Topic) -> str:
    return topology.name(topic)


def key_ring(
    bootstrap: str, topology: Topology, codec: AvroCodec, keks: KeyEncryptionKeys | None
) -> KeyRing:
    """Every data key ``keys`` holds now (``keks`` default to ``$VIGIL_MASTER_KEYS``)."""
    ring = KeyRing(keks or KeyEncryptionKeys.load(), codec)
    read_keys(bootstrap, topology, ring)
    return ring


def read_definitions(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    sealer: Sealer,
    scope: Scope,
    progress: Progress | None = None,
) -> tuple[dict[VersionKey, DefinitionVersion], frozenset[VersionKey]]:
    """Every logged version in scope, with its activation from ``watchers`` when it is known;
    and the versions whose definition is erased."""
    logged: dict[VersionKey, tuple[WatcherDefinition, datetime]] = {}
    erased: set[VersionKey] = set()
    for msg in scan(bootstrap, _topic(topology, Topic.DEFINITION_LOG), progress=progress):
        data = msg.value()
        if data is None:
            continue
        try:
            entry = decode_definition_log(codec, sealer, data)
        except (SerdeError, ValueError, KeyError) as exc:
            log.warning("an unreadable definition_log record: %s", exc)
            continue
        if not scope.covers(entry.tenant_id, entry.user_id, entry.watcher_id):
            continue
        key = (entry.tenant_id, entry.user_id, entry.watcher_id, entry.version)
        if entry.definition_json is None:
            erased.add(key)
            continue
        try:
            parsed = WatcherDefinition.model_validate_json(entry.definition_json)
        except (DefinitionError, ValueError) as exc:
            log.warning("definition-log %s v%s is unreadable: %s", key[2], key[3], exc)
            continue
        if parsed.version != key[3]:
            parsed = parsed.with_version(key[3])
        logged.setdefault(key, (parsed, entry.at))
    activated: dict[VersionKey, datetime] = {}
    for msg in scan(bootstrap, _topic(topology, Topic.WATCHERS), progress=progress):
        value = _decoded(codec, msg.value(), "watcher")
        if value is None or value.get("activated_at") is None:
            continue
        key = (value["tenant_id"], value["user_id"], value["watcher_id"], int(value["version"]))
        activated[key] = value["activated_at"]
    versions = {
        key: DefinitionVersion(definition, at, activated.get(key))
        for key, (definition, at) in logged.items()
    }
    return versions, frozenset(erased - set(logged))


def read_receipts(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    sealer: Sealer,
    scope: Scope,
    progress: Progress | None = None,
) -> list[Receipt]:
    """Every committed receipt in scope, in log order per partition (``erased`` ones too)."""
    out: list[Receipt] = []
    for msg in scan(bootstrap, _topic(topology, Topic.RECEIPTS), progress=progress):
        data = msg.value()
        if data is None:
            continue
        try:
            receipt, _source = decode_receipt(codec, sealer, data)
        except (SerdeError, ValueError) as exc:
            log.warning("an unreadable receipt at offset %s: %s", msg.offset(), exc)
            continue
        if scope.covers(receipt.tenant_id, receipt.user_id, receipt.watcher_id):
            out.append(receipt)
    return out


def read_inputs(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    sealer: Sealer,
    start: Bound,
    end: Bound,
    progress: Progress | None = None,
) -> tuple[dict[str, ReplayInput], frozenset[str]]:
    """Events and ticks in ``[start, end)`` by position (``topic:partition:offset``), and the
    positions of ticks whose payload is erased."""
    inputs: dict[str, ReplayInput] = {}
    erased: set[str] = set()
    for topic in (Topic.EVENTS, Topic.TICKS):
        name = _topic(topology, topic)
        for msg in scan(
            bootstrap, name, start=start, end=end, short=topic.value, progress=progress
        ):
            value = _decoded(codec, msg.value(), "event" if topic is Topic.EVENTS else "tick")
            if value is None:
                continue
            position = position_of(name, msg.partition() or 0, msg.offset() or 0)
            try:
                if topic is Topic.EVENTS:
                    evidence = evidence_from_event(value, position)
                else:
                    evidence = evidence_from_tick(value, position, sealer)
            except ErasedError:
                erased.add(position)
                continue
            except (DefinitionError, SerdeError, ValueError, KeyError):
                continue  # the evaluator dead-lettered it: nothing was decided
            _kind, millis = msg.timestamp()
            arrival = datetime.fromtimestamp(millis / 1000, tz=UTC)
            inputs[position] = ReplayInput(evidence, arrival)
    return inputs, frozenset(erased)


def read_outbox(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    sealer: Sealer,
    progress: Progress | None = None,
) -> dict[str, OutboxEntry | None]:
    """The latest outbox record per delivery key (``None``: purged by a tombstone)."""
    out: dict[str, OutboxEntry | None] = {}
    for msg in scan(bootstrap, _topic(topology, Topic.OUTBOX), progress=progress):
        key = (msg.key() or b"").decode("utf-8", "replace")
        data = msg.value()
        if data is None:
            out[key] = None
            continue
        try:
            out[key] = decode_outbox_entry(codec, sealer, data)
        except (SerdeError, ValueError) as exc:
            log.warning("an unreadable outbox record %s: %s", key, exc)
    return out


def read_history(
    bootstrap: str,
    topology: Topology,
    start: Bound,
    end: Bound,
    scope: Scope,
    *,
    read_at: datetime,
    progress: Progress | None = None,
    codec: AvroCodec | None = None,
    keks: KeyEncryptionKeys | None = None,
) -> History:
    """Everything :func:`pipeline.rules.replay.replay` needs for ``[start, end)`` in ``scope``."""
    codec = codec or default_codec()
    ring = key_ring(bootstrap, topology, codec, keks)
    definitions, erased = read_definitions(bootstrap, topology, codec, ring, scope, progress)
    inputs, erased_inputs = read_inputs(bootstrap, topology, codec, ring, start, end, progress)
    receipts = read_receipts(bootstrap, topology, codec, ring, scope, progress)
    outbox = read_outbox(bootstrap, topology, codec, ring, progress)
    return History(
        definitions=definitions,
        inputs=inputs,
        receipts=receipts,
        selected=frozenset(inputs) | erased_inputs,
        outbox=outbox,
        read_at=read_at,
        erased=erased,
        erased_inputs=erased_inputs,
    )


def _decoded(codec: AvroCodec, data: bytes | None, expected: str) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        record_type, value = codec.decode(data)
    except (SerdeError, ValueError) as exc:
        log.warning("an unreadable %s record: %s", expected, exc)
        return None
    if record_type != expected:
        return None
    return value
