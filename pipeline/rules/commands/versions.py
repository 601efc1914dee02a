"""What a command writes when it changes a watcher: a new version, a lifecycle move, or forgetting.

Owns :func:`accept` (a new definition version: ``registry``, ``watchers`` — moving partitions when
the source moves — ``lifecycle`` and ``definition-log``), :func:`move` (a lifecycle transition,
refused as ``conflict`` when the table has no such move) and :func:`forget` (tombstones for
watchers that leave the registry: erasure, a proposal nobody approved in time). Which command may
do which, and every check before, is ``apply`` and ``context``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pipeline.rules.commands.context import CommandContext, Refusal
from pipeline.rules.commands.model import (
    CommandOutcome,
    LifecycleChange,
    RegistryEntry,
    ResultCode,
    WatcherWrite,
    fingerprint,
    watcher_view,
)
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import TransitionError
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import (
    CloseReason,
    LifecycleEvent,
    WatcherStatus,
    is_live,
    transition,
)

__all__ = ["Forgotten", "accept", "forget", "lifecycle_of", "move"]

Forgotten = tuple[
    tuple[tuple[str, RegistryEntry | None], ...],
    tuple[WatcherWrite, ...],
    tuple[LifecycleChange, ...],
]


def accept(
    ctx: CommandContext,
    definition: WatcherDefinition,
    status: WatcherStatus,
    before: RegistryEntry | None,
    *,
    keep: RegistryEntry | None = None,
) -> CommandOutcome:
    """A new definition version: registry, watchers (moving partitions), lifecycle, log."""
    version = 1 if before is None else before.version + 1
    accepted = definition.with_version(version)
    entry = RegistryEntry(
        tenant_id=accepted.tenant_id,
        user_id=accepted.user_id,
        watcher_id=accepted.watcher_id,
        version=version,
        revision=1 if before is None else before.revision + 1,
        status=status,
        source_id=accepted.source_id,
        session_id=accepted.session_id,
        fingerprint=fingerprint(accepted),
        created_at=ctx.now if keep is None else keep.created_at,
        updated_at=ctx.now,
        definition_json=canonical_json(accepted.to_json()).decode("utf-8"),
        activated_at=(ctx.now if status is WatcherStatus.ACTIVE else None)
        if keep is None
        else keep.activated_at,
    )
    writes = [WatcherWrite(entry.watcher_id, entry.source_id, entry)]
    if before is not None and before.source_id != entry.source_id:
        writes.insert(0, WatcherWrite(before.watcher_id, before.source_id, None))
    return ctx.ok(
        watcher_view(entry),
        registry=((entry.watcher_id, entry),),
        watchers=tuple(writes),
        lifecycle=(lifecycle_of(entry),),
        definitions=(entry,),
    )


def lifecycle_of(entry: RegistryEntry) -> LifecycleChange:
    return LifecycleChange(
        entry.watcher_id, entry.status.value, entry.version, entry.revision, entry.closed_reason
    )


def move(
    ctx: CommandContext,
    entry: RegistryEntry,
    event: LifecycleEvent,
    *,
    reason: CloseReason | None = None,
) -> CommandOutcome:
    """``entry`` after ``event``: a new revision on registry, watchers and lifecycle."""
    try:
        status = transition(entry.status, event)
    except TransitionError as exc:
        raise Refusal(ResultCode.CONFLICT, str(exc), "watcher_id") from None
    moved = replace(
        entry,
        status=status,
        revision=entry.revision + 1,
        updated_at=ctx.now,
        activated_at=ctx.now if event is LifecycleEvent.APPROVE else entry.activated_at,
        closed_reason=reason if not is_live(status) else None,
    )
    return ctx.ok(
        watcher_view(moved),
        registry=((moved.watcher_id, moved),),
        watchers=(WatcherWrite(moved.watcher_id, moved.source_id, moved),),
        lifecycle=(lifecycle_of(moved),),
    )


def forget(entries: Iterable[RegistryEntry]) -> Forgotten:
    """Tombstones for ``entries`` on ``registry``, ``watchers`` and ``lifecycle``."""
    gone = tuple(entries)
    return (
        tuple((e.watcher_id, None) for e in gone),
        tuple(WatcherWrite(e.watcher_id, e.source_id, None) for e in gone),
        tuple(LifecycleChange(e.watcher_id, e.status.value, tombstone=True) for e in gone),
    )
