"""The command processor's loop: decode a command, ask :func:`pipeline.rules.commands.apply.apply`,
write.

Consumes ``commands`` (key: subject) on the exactly-once :class:`StreamApp` with ``registry`` as
its owned, co-partitioned changelog table (one writer per subject partition: caps, CAS and
collapse are atomic) and ``grants`` as a global table. Everything one command decides —
registry, ``watchers`` (on the partition of its source id; the old partition's key tombstoned
when the source moves), ``lifecycle``, ``definition-log``, ``grants``, an immediate ``send``'s
``outbox`` entry (on Java's partition of its delivery key) and its ``command-results`` record —
goes out in the transaction that commits its input offset.

Every step commits (commands are few and callers wait for them), so the grants this processor
wrote are in the global table by the next step; grants written earlier in the same step are
overlaid until then. A record that is not Avro goes to ``dead-letter``; a command that decodes
but breaks a rule gets an ``invalid`` result.

Left out: the rules (``pipeline.rules.commands.apply``) and the process entry point (``cli``).
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

from prometheus_client import REGISTRY, CollectorRegistry

from consumers.commands.metrics import command_counter
from consumers.commands.registry import SubjectIndex
from pipeline.clock import Clock, SystemClock
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import SchemaRegistry, default_registry
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import command_from_value
from pipeline.records.command_result import encode_result
from pipeline.records.definition_log import encode_definition_log
from pipeline.records.grant import decode_grant, encode_grant
from pipeline.records.lifecycle import encode_lifecycle
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.registry_entry import decode_entry, encode_entry
from pipeline.records.watcher import encode_watcher
from pipeline.rules.commands import (
    Command,
    CommandOutcome,
    CommandResult,
    GrantRecord,
    RegistryEntry,
    apply,
    refused,
)
from pipeline.rules.errors import BrokerError, ConfigError, DefinitionError, SerdeError
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.runtime.app import StreamApp
from pipeline.runtime.processing import InputRecord, Message, ProcessContext
from pipeline.runtime.recovery import run_steps
from pipeline.runtime.tables import Table, TableKind, TableSpec

__all__ = ["CommandProcessor"]

log = logging.getLogger(__name__)

REGISTRY_TABLE: Final = "registry"
GRANTS_TABLE: Final = "grants"
COMMAND: Final = "command"


class CommandProcessor:
    """One member of the ``<prefix>command-processor`` group. No network until :meth:`start`."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        *,
        instance_id: str,
        clock: Clock | None = None,
        schemas: SchemaRegistry | None = None,
        metrics: CollectorRegistry = REGISTRY,
        consumer_overrides: dict[str, Any] | None = None,
        static_membership: bool = False,
    ) -> None:
        by_subject = {topology.partitions_for(t) for t in (Topic.COMMANDS, Topic.REGISTRY)}
        if len(by_subject) > 1:
            raise ConfigError("partitions: commands and registry need one count (by subject)")
        self._topology = topology
        self._clock = clock or SystemClock()
        self._schemas = schemas or default_registry()
        self._counter = command_counter(metrics)
        self._topics = {topic: topology.name(topic) for topic in Topic}
        self._pending_grants: dict[str, bytes | None] = {}
        self._grant_cache: dict[str, tuple[bytes, GrantRecord]] = {}
        self._decode_entry = lru_cache(maxsize=65_536)(self._entry)
        self._index = SubjectIndex()
        self.app = StreamApp(
            bootstrap,
            f"{topology.prefix}command-processor",
            instance_id,
            [self._topics[Topic.COMMANDS]],
            self._process,
            tables=[
                TableSpec(REGISTRY_TABLE, self._topics[Topic.REGISTRY], TableKind.OWNED),
                TableSpec(GRANTS_TABLE, self._topics[Topic.GRANTS], TableKind.GLOBAL),
            ],
            decode=self._decode,
            dead_letter_topic=self._topics[Topic.DEAD_LETTER],
            commit_interval_ms=0,
            max_batch=200,
            static_membership=static_membership,
            consumer_overrides=consumer_overrides,
            registry=metrics,
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.app.start()

    def step(self, timeout: float = 0.05) -> int:
        """Process one batch and commit it; returns how many commands were read."""
        try:
            return self.app.step(timeout)
        finally:
            self._pending_grants.clear()  # committed (visible next step) or aborted (redone)

    def run(self, stop: threading.Event) -> None:
        """Process until ``stop`` is set, then commit and leave the group; a broker outage
        waits and resyncs (``pipeline.runtime.recovery``)."""
        self.start()
        try:
            run_steps(self.app, self.step, stop)
        finally:
            self.close()

    def close(self) -> None:
        self.app.close()

    # -- one batch -----------------------------------------------------------------------

    def _decode(self, msg: Message) -> dict[str, Any]:
        record_type, value = self._schemas.decode(msg.value() or b"")
        if record_type != COMMAND:
            raise SerdeError(f"a {record_type} record on {msg.topic()}, expected a command")
        return value

    def _process(self, batch: list[InputRecord], ctx: ProcessContext) -> None:
        registry = ctx.table(REGISTRY_TABLE)
        grants = self._grants(_global_table(ctx, GRANTS_TABLE))
        now = self._clock.now()
        for record in batch:
            self._one(record, ctx, registry, grants, now)

    def _one(
        self,
        record: InputRecord,
        ctx: ProcessContext,
        registry: Table,
        grants: dict[str, GrantRecord],
        now: datetime,
    ) -> None:
        value: dict[str, Any] = record.value
        try:
            command = command_from_value(value)
            key = (record.key or b"").decode("utf-8", "replace")
            if key != command.subject_key:
                raise DefinitionError("the record key is not the command's subject", "key")
        except DefinitionError as exc:
            request_id, verb = str(value.get("request_id", "")), str(value.get("verb", ""))
            log.warning("invalid command %s at offset %s: %s", request_id, record.offset, exc)
            self._counter.labels(verb or "unknown", "invalid").inc()
            if request_id:
                self._answer(ctx, refused(request_id, verb, exc, now))
            return
        outcome = apply(command, self._view(registry, command), grants, now)
        self._write(ctx, registry, grants, command, outcome)
        error = outcome.result.error
        self._counter.labels(command.verb.value, "ok" if error is None else error.code).inc()

    def _view(self, registry: Table, command: Command) -> dict[str, RegistryEntry]:
        """The subject's watchers by id, through the subject index (not a partition scan)."""
        view: dict[str, RegistryEntry] = {}
        for key in self._index.keys(registry, command.subject_key):
            raw = registry.get(key)
            if raw is not None:
                entry = self._decode_entry(raw)
                view[entry.watcher_id] = entry
        return view

    def _entry(self, raw: bytes) -> RegistryEntry:
        return decode_entry(self._schemas, raw)

    def _grants(self, table: Table | None) -> dict[str, GrantRecord]:
        """Every grant: the global table, decoded once per value, with this step's overlay."""
        raw: dict[str, bytes | None] = {} if table is None else dict(table.items())
        raw.update(self._pending_grants)
        grants: dict[str, GrantRecord] = {}
        for grant_id, value in raw.items():
            if value is None:
                continue
            cached = self._grant_cache.get(grant_id)
            if cached is None or cached[0] != value:
                try:
                    cached = (value, decode_grant(self._schemas, value))
                except (SerdeError, ValueError, KeyError) as exc:
                    log.error("grant %s is unreadable, ignored (fail-closed): %s", grant_id, exc)
                    continue
                self._grant_cache[grant_id] = cached
            grants[grant_id] = cached[1]
        return grants

    # -- writing one decision ------------------------------------------------------------

    def _write(
        self,
        ctx: ProcessContext,
        registry: Table,
        grants: dict[str, GrantRecord],
        command: Command,
        outcome: CommandOutcome,
    ) -> None:
        tenant, user = command.tenant_id, command.user_id
        schemas = self._schemas
        now = outcome.result.processed_at
        for watcher_id, entry in outcome.registry:
            key = watcher_key(tenant, user, watcher_id)
            if entry is None:
                registry.delete(key)
            else:
                registry.set(key, encode_entry(schemas, entry))
                self._index.add(registry, key)
        watchers = self._topics[Topic.WATCHERS]
        count = self._topology.partitions_for(Topic.WATCHERS)
        for write in outcome.watchers:
            key = watcher_key(tenant, user, write.watcher_id)
            value = None if write.entry is None else encode_watcher(schemas, write.entry)
            ctx.produce(watchers, key, value, partition_for(write.source_id, count))
        for change in outcome.lifecycle:
            key = (
                subject_key(tenant, user)
                if change.watcher_id is None
                else watcher_key(tenant, user, change.watcher_id)
            )
            value = (
                None if change.tombstone else encode_lifecycle(schemas, change, tenant, user, now)
            )
            ctx.produce(self._topics[Topic.LIFECYCLE], key, value)
        log_topic = self._topics[Topic.DEFINITION_LOG]
        log_partition = partition_for(
            subject_key(tenant, user), self._topology.partitions_for(Topic.DEFINITION_LOG)
        )
        for entry in outcome.definitions:
            key = watcher_key(tenant, user, entry.watcher_id)
            value = encode_definition_log(schemas, entry, command, now)
            ctx.produce(log_topic, key, value, log_partition)
        self._write_grants(ctx, grants, outcome.grants)
        outbox = self._topics[Topic.OUTBOX]
        outbox_partitions = self._topology.partitions_for(Topic.OUTBOX)
        for delivery in outcome.outbox:
            key = delivery.delivery_key
            value = encode_outbox_entry(schemas, delivery)
            ctx.produce(outbox, key, value, partition_for(key, outbox_partitions))
        self._answer(ctx, outcome.result)

    def _write_grants(
        self,
        ctx: ProcessContext,
        grants: dict[str, GrantRecord],
        writes: tuple[tuple[str, GrantRecord | None], ...],
    ) -> None:
        for grant_id, record in writes:
            value = None if record is None else encode_grant(self._schemas, record)
            ctx.produce(self._topics[Topic.GRANTS], grant_id, value)
            self._pending_grants[grant_id] = value
            if record is None:
                grants.pop(grant_id, None)
            else:
                grants[grant_id] = record

    def _answer(self, ctx: ProcessContext, result: CommandResult) -> None:
        value = encode_result(self._schemas, result)
        ctx.produce(self._topics[Topic.COMMAND_RESULTS], result.request_id, value)


def _global_table(ctx: ProcessContext, name: str) -> Table | None:
    """The global table, or None while it is empty: the runtime's lookup treats an empty global
    table as absent (``TaskState.table`` tests truthiness), and no grants means deny anyway."""
    try:
        return ctx.table(name)
    except BrokerError:
        return None
