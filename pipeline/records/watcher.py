"""The command processor's output records on the wire: ``watchers``, ``lifecycle`` and
``definition-log`` values built from registry entries (schemas in ``schemas/*.avsc``).

Registry entries, grants, commands and results map themselves (``pipeline.rules.commands.model``);
this module owns only the records other consumers read. Left out: keys and partitions
(``processor``) and encoding (``pipeline.kafka.serde``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipeline.rules.commands.model import Command, LifecycleChange, RegistryEntry
from pipeline.rules.sources import EventSource

__all__ = ["definition_log_record", "lifecycle_record", "watcher_record"]


def watcher_record(entry: RegistryEntry) -> dict[str, Any]:
    """A ``watcher`` value: the definition re-keyed for the evaluator, with status and revision,
    plus the typed fields its index routes on (source kind and id, event type)."""
    source = entry.definition().source
    return {
        "tenant_id": entry.tenant_id,
        "user_id": entry.user_id,
        "watcher_id": entry.watcher_id,
        "version": entry.version,
        "revision": entry.revision,
        "status": entry.status.value,
        "source_kind": source.kind,
        "source_id": entry.source_id,
        "event_type": source.event_type if isinstance(source, EventSource) else None,
        "session_id": entry.session_id,
        "activated_at": entry.activated_at,
        "updated_at": entry.updated_at,
        "definition": entry.definition_json,
    }


def lifecycle_record(
    change: LifecycleChange, tenant_id: str, user_id: str, at: datetime
) -> dict[str, Any]:
    """A ``lifecycle`` value: one watcher's state, or (no watcher id) a subject's erasure."""
    return {
        "scope": "subject" if change.watcher_id is None else "watcher",
        "tenant_id": tenant_id,
        "user_id": user_id,
        "watcher_id": change.watcher_id,
        "version": change.version,
        "revision": change.revision,
        "status": change.status,
        "reason": None if change.reason is None else change.reason.value,
        "at": at,
    }


def definition_log_record(entry: RegistryEntry, command: Command, at: datetime) -> dict[str, Any]:
    """A ``definition_log`` value: one accepted version, who asserted it and when."""
    return {
        "tenant_id": entry.tenant_id,
        "user_id": entry.user_id,
        "watcher_id": entry.watcher_id,
        "version": entry.version,
        "revision": entry.revision,
        "request_id": command.request_id,
        "principal": command.principal.name,
        "role": command.principal.role.value,
        "at": at,
        "definition": entry.definition_json,
    }
