"""What one command decided, written in the open transaction: the command processor's writes.

Owns :class:`DecisionWriter` (``registry``, ``watchers`` at each source's partition,
``lifecycle``, ``definition-log``, ``grants``, an immediate send's ``outbox`` entry, a
``redeliver``'s request, ``command-results``) and the data keys a command makes or shreds
(:func:`shred_keys`, :func:`ensure_keys`). Leaves out deciding and reading commands (``loop``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from consumers.commands.registry import SubjectIndex
from pipeline.crypto import KeyRing
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command_result import encode_result
from pipeline.records.definition_log import encode_definition_log
from pipeline.records.grant import encode_grant
from pipeline.records.lifecycle import encode_lifecycle
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.redelivery import encode_redelivery
from pipeline.records.registry_entry import encode_entry
from pipeline.records.watcher import encode_watcher
from pipeline.rules.commands import (
    Command,
    CommandOutcome,
    CommandResult,
    CommandVerb,
    GrantRecord,
    Shred,
)
from pipeline.rules.data_keys import KeyOwner, evidence_owner, subject_owner
from pipeline.rules.keys import subject_key, watcher_key
from pipeline.rules.lifecycle import is_live
from pipeline.runtime.processing import ProcessContext
from pipeline.runtime.tables import Table
from pipeline.runtime.views import KeyView

__all__ = ["DecisionWriter", "ensure_keys", "shred_keys"]


class DecisionWriter:
    """Writes a command's outcome and its result; the grants written this step, overlaid."""

    def __init__(self, topology: Topology, codec: AvroCodec, index: SubjectIndex) -> None:
        self._topology = topology
        self._topics = {topic: topology.name(topic) for topic in Topic}
        self._codec = codec
        self._index = index
        # Grants written in this step, read as the global table until it has them.
        self.pending_grants: dict[str, bytes | None] = {}

    def decision(
        self,
        ctx: ProcessContext,
        registry: Table,
        keys: KeyView,
        grants: dict[str, GrantRecord],
        command: Command,
        outcome: CommandOutcome,
    ) -> None:
        """Everything ``outcome`` decided, in the open transaction, then the result."""
        tenant, user = command.tenant_id, command.user_id
        now = outcome.result.processed_at
        shredded = shred_keys(keys, tenant, user, outcome.shred)
        ensure_keys(keys, command, outcome, now)
        self._registry(ctx, registry, keys.ring, command, outcome)
        self._lifecycle(ctx, keys.ring, command, outcome, now)
        self._grants(ctx, grants, outcome.grants)
        self._deliveries(ctx, keys.ring, outcome)
        result = outcome.result
        if shredded and result.result is not None:
            result = result.model_copy(
                update={"result": {**result.result, "keys_shredded": shredded}}
            )
        self.answer(ctx, result, keys.ring, subject_owner(tenant, user))

    def _registry(
        self,
        ctx: ProcessContext,
        registry: Table,
        ring: KeyRing,
        command: Command,
        outcome: CommandOutcome,
    ) -> None:
        """``registry`` (the subject index kept) and ``watchers`` at each source's partition."""
        tenant, user, codec = command.tenant_id, command.user_id, self._codec
        for watcher_id, entry in outcome.registry:
            key = watcher_key(tenant, user, watcher_id)
            if entry is None:
                registry.delete(key)
            else:
                registry.set(key, encode_entry(codec, ring, entry))
                self._index.add(registry, key)
        watchers = self._topics[Topic.WATCHERS]
        count = self._topology.partitions_for(Topic.WATCHERS)
        for write in outcome.watchers:
            key = watcher_key(tenant, user, write.watcher_id)
            value = None if write.entry is None else encode_watcher(codec, ring, write.entry)
            ctx.produce(watchers, key, value, partition_for(write.source_id, count))

    def _lifecycle(
        self,
        ctx: ProcessContext,
        ring: KeyRing,
        command: Command,
        outcome: CommandOutcome,
        now: datetime,
    ) -> None:
        """``lifecycle`` changes and ``definition-log`` entries (one partition per subject)."""
        tenant, user, codec = command.tenant_id, command.user_id, self._codec
        for change in outcome.lifecycle:
            key = (
                subject_key(tenant, user)
                if change.watcher_id is None
                else watcher_key(tenant, user, change.watcher_id)
            )
            value = None if change.tombstone else encode_lifecycle(codec, change, tenant, user, now)
            ctx.produce(self._topics[Topic.LIFECYCLE], key, value)
        log_topic = self._topics[Topic.DEFINITION_LOG]
        log_partition = partition_for(
            subject_key(tenant, user), self._topology.partitions_for(Topic.DEFINITION_LOG)
        )
        for entry in outcome.definitions:
            key = watcher_key(tenant, user, entry.watcher_id)
            value = encode_definition_log(codec, ring, entry, command, now, outcome.note)
            ctx.produce(log_topic, key, value, log_partition)

    def _deliveries(self, ctx: ProcessContext, ring: KeyRing, outcome: CommandOutcome) -> None:
        """An immediate send's ``outbox`` entry and a ``redeliver``'s request, on Java's
        partition of the delivery key."""
        outbox = self._topics[Topic.OUTBOX]
        outbox_partitions = self._topology.partitions_for(Topic.OUTBOX)
        for delivery in outcome.outbox:
            key = delivery.delivery_key
            value = encode_outbox_entry(self._codec, ring, delivery)
            ctx.produce(outbox, key, value, partition_for(key, outbox_partitions))
        redeliveries = self._topics[Topic.REDELIVERIES]
        for request in outcome.redeliveries:
            key = request.delivery_key
            value = encode_redelivery(self._codec, request)
            ctx.produce(redeliveries, key, value, partition_for(key, outbox_partitions))

    def _grants(
        self,
        ctx: ProcessContext,
        grants: dict[str, GrantRecord],
        writes: tuple[tuple[str, GrantRecord | None], ...],
    ) -> None:
        """``grants`` written, and overlaid on the global table until they are read back."""
        for grant_id, record in writes:
            value = None if record is None else encode_grant(self._codec, record)
            ctx.produce(self._topics[Topic.GRANTS], grant_id, value)
            self.pending_grants[grant_id] = value
            if record is None:
                grants.pop(grant_id, None)
            else:
                grants[grant_id] = record

    def answer(
        self,
        ctx: ProcessContext,
        result: CommandResult,
        ring: KeyRing | None = None,
        owner: KeyOwner | None = None,
    ) -> None:
        """The result, its body sealed under ``owner``'s key (plain without one: then it
        carries no subject content, e.g. an erasure's own answer or a refusal)."""
        if ring is None or owner is None or ring.record(owner) is None:
            value = encode_result(self._codec, _NO_KEYS, result, None)
        else:
            value = encode_result(self._codec, ring, result, owner)
        ctx.produce(self._topics[Topic.COMMAND_RESULTS], result.request_id, value)


def shred_keys(keys: KeyView, tenant: str, user: str, shred: tuple[Shred, ...]) -> int:
    """Tombstone the keys ``shred`` names (the partition's table writes its changelog);
    returns how many."""
    done = 0
    for scope in shred:
        owners = keys.ring.owners(tenant, user, scope.watcher_id)
        if scope.watcher_id is not None:  # cancel: the watcher's evidence keys only
            owners = [o for o in owners if o.watcher_id is not None]
        for owner in owners:
            keys.table.delete(owner.topic_key)
            keys.ring.apply(owner.topic_key, None)
            done += 1
    return done


def ensure_keys(keys: KeyView, command: Command, outcome: CommandOutcome, now: datetime) -> None:
    """The keys this command's writes seal under: the subject's (when it writes anything
    of the subject's, or asks with ``key``) and each new version's evidence key; and every
    key of the subject still wrapped under an older KEK, wrapped again under the newest."""
    if not outcome.result.ok or command.verb is CommandVerb.ERASE:
        return
    entries = [entry for _, entry in outcome.registry if entry is not None]
    wanted: list[KeyOwner] = []
    if command.verb is CommandVerb.KEY or entries or outcome.outbox or outcome.definitions:
        wanted.append(subject_owner(command.tenant_id, command.user_id))
    # Evidence keys for versions that can still gather evidence: a cancel's shredded key is
    # never made again, and a closed watcher gathers none.
    wanted.extend(
        evidence_owner(e.tenant_id, e.user_id, e.watcher_id, e.version)
        for e in entries
        if is_live(e.status)
    )
    for owner in wanted:
        if keys.ring.record(owner) is None:
            topic_key, raw = keys.ring.create(owner, now)
            keys.table.set(topic_key, raw)
    for owner in keys.ring.older_owners(command.tenant_id, command.user_id):
        renewed = keys.ring.rewrapped(owner)  # None unless an older KEK wraps it
        if renewed is not None:
            keys.table.set(*renewed)


class _NoKeys:
    """The sealer of a result body with no key to seal under: it never seals or opens."""

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        return None

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        return None


_NO_KEYS: Final = _NoKeys()
