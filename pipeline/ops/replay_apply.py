"""``vigil replay --apply``'s reads and writes: the current grants, and a recovery plan written as
the evaluator would have written it.

Owns :func:`read_grants` (latest per key; an unreadable one is left out: fail-closed),
:func:`recovery_records` (keyed, placed and sealed as the evaluator does) and :func:`write_recovery`
(one transaction under ``<namespace>-replay-apply``, so applies never interleave). Left out:
deciding, authorizing and auditing, and reading the history."""

from __future__ import annotations

import logging

from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.scan import scan
from pipeline.kafka.serde import AvroCodec
from pipeline.kafka.topics import Topic, Topology
from pipeline.kafka.transaction import Record, write_in_one_transaction
from pipeline.records.grant import decode_grant
from pipeline.records.outbox_entry import encode_outbox_entry
from pipeline.records.receipt import encode_receipt
from pipeline.records.sealing import Sealer
from pipeline.rules.authz import Grant
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.keys import watcher_key
from pipeline.rules.recovery import RecoveryPlan
from pipeline.rules.retention import retain_until

__all__ = ["read_grants", "recovery_records", "transactional_id", "write_recovery"]

log = logging.getLogger(__name__)


def read_grants(bootstrap: str, topology: Topology, codec: AvroCodec) -> list[Grant]:
    """Every grant ``grants`` holds now (tombstoned ones gone, unreadable ones left out)."""
    latest: dict[bytes, bytes | None] = {}
    for msg in scan(bootstrap, topology.name(Topic.GRANTS)):
        latest[msg.key() or b""] = msg.value()
    grants: list[Grant] = []
    for key, raw in latest.items():
        if raw is None:
            continue
        try:
            grants.append(decode_grant(codec, raw).grant)
        except (SerdeError, ValueError, KeyError, DefinitionError) as exc:
            log.warning("grants record %r is unreadable (left out): %s", key[:80], exc)
    return grants


def recovery_records(
    topology: Topology, codec: AvroCodec, sealer: Sealer, plan: RecoveryPlan
) -> list[Record]:
    """The receipts and outbox entries ``plan`` writes, where the evaluator writes them."""
    receipts = topology.name(Topic.RECEIPTS)
    outbox = topology.name(Topic.OUTBOX)
    receipt_partitions = topology.partitions_for(Topic.RECEIPTS)
    outbox_partitions = topology.partitions_for(Topic.OUTBOX)
    records: list[Record] = []
    for recovery in plan.recoveries:
        receipt = recovery.receipt
        until = retain_until(receipt.evaluated_at, recovery.evidence_retention)
        key = watcher_key(receipt.tenant_id, receipt.user_id, receipt.watcher_id)
        value = encode_receipt(codec, sealer, receipt, recovery.source_id, None, until)
        place = partition_for(recovery.source_id, receipt_partitions)
        records.append(Record(receipts, key, value, place))
        entry = recovery.outbox
        if entry is not None:
            value = encode_outbox_entry(codec, sealer, entry)
            place = partition_for(entry.delivery_key, outbox_partitions)
            records.append(Record(outbox, entry.delivery_key, value, place))
    return records


def transactional_id(namespace: str) -> str:
    return f"{namespace}-replay-apply"


def write_recovery(
    bootstrap: str,
    topology: Topology,
    codec: AvroCodec,
    sealer: Sealer,
    plan: RecoveryPlan,
    namespace: str,
) -> int:
    """Write ``plan`` in one transaction; returns how many records."""
    records = recovery_records(topology, codec, sealer, plan)
    if not records:
        return 0
    return write_in_one_transaction(bootstrap, transactional_id(namespace), records)
