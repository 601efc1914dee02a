"""The command processor's loop: decode a command, ask :func:`pipeline.rules.commands.apply.apply`,
write (DESIGN.md §2, §10).

Owns :class:`CommandProcessor` with its settings and deps: ``commands`` in, ``registry`` and
``keys`` owned (one writer per subject partition), ``grants`` whole, every step committed; the
only maker of data keys. Leaves out the rules and the process entry point (``cli``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry

from consumers.commands.metrics import command_counter
from consumers.commands.registry import SubjectIndex
from consumers.commands.writes import DecisionWriter
from pipeline.clock import Clock, SystemClock
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import command_from_value
from pipeline.records.grant import decode_grant
from pipeline.records.registry_entry import decode_entry
from pipeline.rules.budgets import NO_CEILINGS, BudgetCeilings
from pipeline.rules.commands import (
    Command,
    CommandVerb,
    GrantRecord,
    RegistryEntry,
    apply,
    refused,
)
from pipeline.rules.commands.host import NO_HOST, Host
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import (
    ConfigError,
    DefinitionError,
    ErasedError,
    InfrastructureError,
    SerdeError,
)
from pipeline.runtime.app import GroupProtocol, StreamApp
from pipeline.runtime.processing import InputRecord, Message, ProcessContext
from pipeline.runtime.recovery import run_steps
from pipeline.runtime.tables import Table, TableKind, TableSpec
from pipeline.runtime.views import UNREADABLE, DecodedCache, KeyView

__all__ = ["CommandDeps", "CommandProcessor", "CommandSettings"]

log = logging.getLogger(__name__)

_MAX_REQUEST_ID: Final = 128
# Commands per processor call: where a batch of slow ones (a subject with thousands of watchers)
# may be cut to commit within the transaction timeout (``StreamApp``, slice_records).
_SLICE: Final = 16
_VERBS: Final = frozenset(verb.value for verb in CommandVerb)
# What the processor writes besides its tables (named when a resync waits on their partitions).
_OUTPUTS: Final = (
    Topic.COMMAND_RESULTS,
    Topic.WATCHERS,
    Topic.LIFECYCLE,
    Topic.DEFINITION_LOG,
    Topic.OUTBOX,
    Topic.REDELIVERIES,
    Topic.GRANTS,
)
REGISTRY_TABLE: Final = "registry"
KEYS_TABLE: Final = "keys"
GRANTS_TABLE: Final = "grants"
COMMAND: Final = "command"


@dataclass(frozen=True, slots=True)
class CommandSettings:
    """Where the command processor runs and the rules' knobs: plain values."""

    bootstrap: str
    topology: Topology
    instance_id: str
    group_id: str = ""
    limits: Limits = DEFAULT_LIMITS  # what a subject may hold ([limits])
    ceilings: BudgetCeilings = NO_CEILINGS  # the most any window may allow
    host: Host = NO_HOST  # the daemon's subject and chats: the only ones that may run and prompt
    key_cache: int = 65_536  # data keys each partition's ring keeps open
    static_membership: bool = False  # a restart with the same instance id keeps its partitions
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC
    consumer_overrides: dict[str, Any] = field(default_factory=dict)
    producer_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        return self.group_id or f"{self.topology.prefix}command-processor"


@dataclass(frozen=True, slots=True)
class CommandDeps:
    """The command processor's collaborators. ``keks`` default to ``$VIGIL_MASTER_KEYS``
    (none there: a ``ConfigError``)."""

    keks: KeyEncryptionKeys = field(default_factory=KeyEncryptionKeys.load)
    clock: Clock = field(default_factory=SystemClock)
    codec: AvroCodec = field(default_factory=default_codec)
    metrics_registry: CollectorRegistry = REGISTRY


class CommandProcessor:
    """One member of the ``<namespace>.command-processor`` group (``settings.group``). No
    network until :meth:`run` (or :meth:`start`).

    Everything one command decides — registry, ``watchers`` (on the partition of its source id; the
    old partition's key tombstoned when the source moves), ``lifecycle``, ``definition-log``,
    ``grants``, an immediate ``send``'s ``outbox`` entry or a ``redeliver``'s ``redeliveries``
    request (on Java's partition of its delivery key) and its ``command-results`` record — goes out
    in the transaction that commits its input offset. The limits on what a subject holds
    (``[limits]``, DESIGN.md §10) are applied here.

    Data keys (DESIGN §10 "Erasure's reach") are made here and nowhere else: the subject's key when
    a command first writes something of the subject's (or asks, verb ``key``), a watcher version's
    evidence key with each new version, both re-wrapped under the newest key-encryption key when a
    command touches an older one; ``cancel`` tombstones the watcher's evidence keys, erasure every
    key of the subject. Every subject field written here is sealed with the partition's ring, and
    commands' sealed content is opened with it.

    Every step commits (commands are few and callers wait for them), so the grants this processor
    wrote are in the global table by the next step; grants written earlier in the same step are
    overlaid until then. A step whose commands are slow is cut where its transaction has used a
    third of its timeout. A record that is not Avro goes to ``dead-letter``; a command that decodes
    but breaks a rule gets an ``invalid`` result.
    """

    def __init__(self, settings: CommandSettings, deps: CommandDeps) -> None:
        topology = settings.topology
        by_subject = {
            topology.partitions_for(t) for t in (Topic.COMMANDS, Topic.REGISTRY, Topic.KEYS)
        }
        if len(by_subject) > 1:
            raise ConfigError("partitions: commands, registry and keys need one count (by subject)")
        self.settings = settings
        self._clock = deps.clock
        self._codec = deps.codec
        self._keks = deps.keks
        self._keys: dict[int, KeyView] = {}  # per task partition: its own ring
        self._counter = command_counter(deps.metrics_registry)
        self._topics = {topic: topology.name(topic) for topic in Topic}
        self._grant_cache: DecodedCache[GrantRecord] = DecodedCache()
        self._index = SubjectIndex()
        self._writer = DecisionWriter(topology, self._codec, self._index)
        self.app = self._stream_app(deps.metrics_registry)

    def _stream_app(self, metrics_registry: CollectorRegistry) -> StreamApp:
        """Commands in, ``registry`` and ``keys`` owned, ``grants`` whole; every step commits."""
        settings = self.settings
        return StreamApp(
            settings.bootstrap,
            settings.group,
            settings.instance_id,
            [self._topics[Topic.COMMANDS]],
            self._process,
            tables=[
                TableSpec(REGISTRY_TABLE, self._topics[Topic.REGISTRY], TableKind.OWNED),
                TableSpec(KEYS_TABLE, self._topics[Topic.KEYS], TableKind.OWNED),
                TableSpec(GRANTS_TABLE, self._topics[Topic.GRANTS], TableKind.GLOBAL),
            ],
            decode=self._decode,
            dead_letter_topic=self._topics[Topic.DEAD_LETTER],
            commit_interval_ms=0,
            max_batch=200,
            slice_records=_SLICE,
            metrics_registry=metrics_registry,
            schemas_topic=self._topics[Topic.SCHEMAS],
            codec=self._codec,
            static_membership=settings.static_membership,
            group_protocol=settings.group_protocol,
            consumer_overrides=settings.consumer_overrides,
            producer_overrides=settings.producer_overrides,
            outputs=[self._topics[t] for t in _OUTPUTS],
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.app.start()

    def step(self, timeout: float = 0.05) -> int:
        """Process one batch and commit it; returns how many commands were read."""
        try:
            return self.app.step(timeout)
        finally:
            self._writer.pending_grants.clear()  # committed (visible next step) or aborted (redone)

    def run(self, stop: threading.Event) -> None:
        """Process until ``stop`` is set, then commit and leave the group; a broker outage
        waits and resyncs (``pipeline.runtime.recovery``)."""
        try:
            run_steps(self.app, self.step, stop, start=self.start)
        finally:
            self.close()

    def close(self) -> None:
        self.app.close()

    # -- one batch -----------------------------------------------------------------------

    def _decode(self, msg: Message) -> dict[str, Any]:
        record_type, value = self._codec.decode(msg.value() or b"")
        if record_type != COMMAND:
            raise SerdeError(f"a {record_type} record on {msg.topic()}, expected a command")
        return value

    def _process(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        registry = ctx.table(REGISTRY_TABLE)
        keys = self._key_view(ctx)
        grants = self._grants(ctx.table(GRANTS_TABLE))
        now = self._clock.now()
        for record in batch:
            self._one(record, ctx, registry, keys, grants, now)

    def _key_view(self, ctx: ProcessContext) -> KeyView:
        """The partition's keys through its own ring (rebuilt with a new table object, which a
        restore or a rebuilt producer gives); caught up with rollbacks."""
        table = ctx.table(KEYS_TABLE)
        view = self._keys.get(ctx.partition)
        if view is None or view.table is not table:
            ring = KeyRing(self._keks, self._codec, cache_size=self.settings.key_cache)
            view = self._keys[ctx.partition] = KeyView(table, ring)
        else:
            view.refresh()
        return view

    def _one(
        self,
        record: InputRecord,
        ctx: ProcessContext,
        registry: Table,
        keys: KeyView,
        grants: dict[str, GrantRecord],
        now: datetime,
    ) -> None:
        value: dict[str, Any] = record.value
        try:
            command = command_from_value(value, keys.ring)
            key = (record.key or b"").decode("utf-8", "replace")
            if key != command.subject_key:
                raise DefinitionError("the record key is not the command's subject", "key")
        except DefinitionError as exc:
            request_id, verb = str(value.get("request_id", "")), str(value.get("verb", ""))
            # Only an answerable id gets an answer: a hostile megabyte one would make a result
            # record the broker refuses. The verb is a metric label: only a known one counts.
            answerable = 0 < len(request_id) <= _MAX_REQUEST_ID
            verb = verb if verb in _VERBS else "unknown"
            log.warning("invalid command %s at offset %s: %s", request_id[:128], record.offset, exc)
            self._counter.labels(verb, "invalid").inc()
            if answerable:
                tenant, user = value.get("tenant_id"), value.get("user_id")
                owner = (
                    subject_owner(tenant, user)
                    if isinstance(tenant, str) and isinstance(user, str)
                    else None
                )
                self._writer.answer(ctx, refused(request_id, verb, exc, now), keys.ring, owner)
            return
        try:
            outcome = apply(
                command,
                self._view(registry, keys.ring, command),
                grants,
                now,
                self.settings.limits,
                ceilings=self.settings.ceilings,
                host=self.settings.host,
            )
        except InfrastructureError:
            raise
        except Exception as exc:  # a rule failing on this command refuses it, never stops us
            log.exception("command %s could not be decided", command.request_id)
            reason = DefinitionError(f"cannot be decided: {type(exc).__name__}: {exc}")
            self._counter.labels(command.verb.value, "invalid").inc()
            owner = subject_owner(command.tenant_id, command.user_id)
            self._writer.answer(
                ctx, refused(command.request_id, command.verb.value, reason, now), keys.ring, owner
            )
            return
        self._writer.decision(ctx, registry, keys, grants, command, outcome)
        error = outcome.result.error
        self._counter.labels(command.verb.value, "ok" if error is None else error.code).inc()

    def _view(
        self, registry: Table, ring: KeyRing, command: Command
    ) -> Mapping[str, RegistryEntry]:
        """The subject's watchers by id, kept by the subject index (not a partition scan, and
        only changed entries decoded again). An entry whose sealed definition no longer opens
        is erased: left out."""

        def decode(raw: bytes) -> RegistryEntry | None:
            try:
                return decode_entry(self._codec, ring, raw)
            except ErasedError:
                log.warning("a registry entry of %s is erased: left out", command.subject_key)
                return None

        return self._index.view(registry, command.subject_key, decode)

    def _grants(self, table: Table) -> dict[str, GrantRecord]:
        """Every grant: the global table, decoded once per value, with this step's overlay."""
        raw: dict[str, bytes | None] = dict(table.items())
        raw.update(self._writer.pending_grants)
        grants: dict[str, GrantRecord] = {}
        for grant_id, value in raw.items():
            if value is None:
                continue
            try:
                grants[grant_id] = self._grant_cache.get(grant_id, value, self._decode_grant)
            except UNREADABLE as exc:
                log.error("grant %s is unreadable, ignored (fail-closed): %s", grant_id, exc)
        return grants

    def _decode_grant(self, raw: bytes) -> GrantRecord:
        return decode_grant(self._codec, raw)
