"""Export and import of one subject's watchers between deployments (seed 000's snapshot).

Owns the export file (:data:`EXPORT_FORMAT`: per watcher what ``watch show`` returns; no secrets, no
receipts), its total, bounded parser (:func:`parse_export`, :func:`exported_watcher`) and the
operator verbs ``export`` (one page of the registry) and ``import`` (one watcher kept as it was,
refused as ``create`` refuses: conflicts, grants, limits, the host's verbs, agent-watch bounds).
Left out: reading and writing files, one command per watcher (``pipeline.cli``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pipeline.rules.agent_watch import check_agent_watch
from pipeline.rules.authz import Action
from pipeline.rules.bounds import parse_json
from pipeline.rules.commands.context import (
    CommandContext,
    Refusal,
    check_cap,
    check_grant,
    check_host_definition,
    check_room,
)
from pipeline.rules.commands.model import (
    CommandOutcome,
    RegistryEntry,
    ResultCode,
    WatcherWrite,
    fingerprint,
    watcher_view,
)
from pipeline.rules.commands.versions import lifecycle_of
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant, rfc3339_micros
from pipeline.rules.keys import canonical_json
from pipeline.rules.lifecycle import CloseReason, WatcherStatus, is_live

__all__ = [
    "EXPORT_FORMAT",
    "MAX_FILE_BYTES",
    "MAX_WATCHERS",
    "ExportFile",
    "export_page",
    "exported_watcher",
    "import_watcher",
    "parse_export",
]

EXPORT_FORMAT: Final = "vigil.export.v1"
MAX_FILE_BYTES: Final = 32 << 20
MAX_WATCHERS: Final = 20_000
PAGE_MAX: Final = 200
_FILE_KEYS: Final = frozenset({"format", "tenant_id", "user_id", "exported_at", "watchers"})
_WATCHER_KEYS: Final = frozenset(
    {
        "tenant_id", "user_id", "watcher_id", "version", "revision", "status", "source_id",
        "session_id", "created_at", "updated_at", "activated_at", "closed_reason", "definition",
    }
)  # fmt: skip


_STATUSES: Final = frozenset(s.value for s in WatcherStatus)
_REASONS: Final = frozenset(r.value for r in CloseReason)


@dataclass(frozen=True, slots=True)
class ExportFile:
    tenant_id: str
    user_id: str
    exported_at: datetime
    watchers: tuple[RegistryEntry, ...]


def _keys(value: object, wanted: frozenset[str], where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DefinitionError("an object", where)
    if set(value) != wanted:
        odd = sorted(str(k)[:40] for k in set(value) ^ wanted)[:5]
        raise DefinitionError(f"the fields are {', '.join(sorted(wanted))} (not: {odd})", where)
    return value


def _count(value: object, where: str) -> int:
    if type(value) is not int or not 1 <= value <= 2**62:
        raise DefinitionError("a positive integer", where)
    return value


def _text(value: object, where: str) -> str:
    if type(value) is not str or not 0 < len(value) <= 200:
        raise DefinitionError("a string of 1..200 characters", where)
    return value


def _instant(value: object, where: str, *, optional: bool = False) -> datetime | None:
    if value is None and optional:
        return None
    return parse_instant(_text(value, where), where)


def exported_watcher(body: object, tenant_id: str, user_id: str, where: str = "") -> RegistryEntry:
    """One exported watcher of subject ``(tenant_id, user_id)`` as a registry entry."""
    at = f"{where}." if where else ""
    value = _keys(body, _WATCHER_KEYS, where or "watcher")
    if (value["tenant_id"], value["user_id"]) != (tenant_id, user_id):
        raise DefinitionError("a watcher of another subject", f"{at}tenant_id")
    version = _count(value["version"], f"{at}version")
    status = value["status"]
    if type(status) is not str or status not in _STATUSES:
        raise DefinitionError("a watcher status", f"{at}status")
    reason = value["closed_reason"]
    if reason is not None and (type(reason) is not str or reason not in _REASONS):
        raise DefinitionError("a close reason or null", f"{at}closed_reason")
    raw = value["definition"]
    if not isinstance(raw, Mapping) or raw.get("version", version) != version:
        raise DefinitionError("the definition of that version", f"{at}definition")
    body = {k: v for k, v in raw.items() if k != "version"}
    definition = WatcherDefinition.from_json(body, tenant_id=tenant_id, user_id=user_id)
    definition = definition.with_version(version)
    for name in ("watcher_id", "source_id", "session_id"):
        if value[name] != getattr(definition, name):
            raise DefinitionError("does not match the definition", f"{at}{name}")
    created = _instant(value["created_at"], f"{at}created_at")
    updated = _instant(value["updated_at"], f"{at}updated_at")
    assert created is not None and updated is not None
    return RegistryEntry(
        tenant_id=tenant_id,
        user_id=user_id,
        watcher_id=definition.watcher_id,
        version=version,
        revision=_count(value["revision"], f"{at}revision"),
        status=WatcherStatus(status),
        source_id=definition.source_id,
        session_id=definition.session_id,
        fingerprint=fingerprint(definition),
        created_at=created,
        updated_at=updated,
        definition_json=canonical_json(definition.to_json()).decode("utf-8"),
        activated_at=_instant(value["activated_at"], f"{at}activated_at", optional=True),
        closed_reason=None if reason is None else CloseReason(reason),
    )


def parse_export(text: str | bytes) -> ExportFile:
    """An export file, every watcher checked; a :class:`DefinitionError` for anything else."""
    value = _keys(parse_json(text, "file", max_bytes=MAX_FILE_BYTES), _FILE_KEYS, "file")
    if value["format"] != EXPORT_FORMAT:
        raise DefinitionError(f"not a {EXPORT_FORMAT} file", "format")
    tenant, user = _text(value["tenant_id"], "tenant_id"), _text(value["user_id"], "user_id")
    exported = _instant(value["exported_at"], "exported_at")
    assert exported is not None
    items = value["watchers"]
    if not isinstance(items, list) or len(items) > MAX_WATCHERS:
        raise DefinitionError(f"a list of at most {MAX_WATCHERS} watchers", "watchers")
    watchers = tuple(
        exported_watcher(item, tenant, user, f"watchers[{i}]") for i, item in enumerate(items)
    )
    if len({w.watcher_id for w in watchers}) != len(watchers):
        raise DefinitionError("a watcher id is listed twice", "watchers")
    return ExportFile(tenant, user, exported, watchers)


def export_page(ctx: CommandContext) -> CommandOutcome:
    """One page (``offset``, ``limit`` ≤ 200) of the subject's watchers, closed ones too, by id,
    with the total: what an export file lists."""
    command = ctx.command
    entries = sorted(ctx.view.values(), key=lambda e: e.watcher_id)
    start = command.offset or 0
    page = entries[start : start + min(command.limit or PAGE_MAX, PAGE_MAX)]
    return ctx.ok(
        {
            "format": EXPORT_FORMAT,
            "tenant_id": command.tenant_id,
            "user_id": command.user_id,
            "exported_at": rfc3339_micros(ctx.now),
            "watchers": [watcher_view(e) for e in page],
            "total": len(entries),
        }
    )


def import_watcher(ctx: CommandContext) -> CommandOutcome:
    """One exported watcher (``definition``: its exported object), kept as it was."""
    command = ctx.command
    entry = exported_watcher(command.definition, command.tenant_id, command.user_id)
    before = ctx.view.get(entry.watcher_id)
    if before is not None and (is_live(before.status) or before.version >= entry.version):
        raise Refusal(
            ResultCode.CONFLICT,
            f"watcher {entry.watcher_id!r} exists and is {before.status.value} "
            f"(version {before.version})",
            "watcher_id",
        )
    definition = entry.definition()
    if definition.budgets is not None:
        ctx.ceilings.check(definition.budgets)
    if is_live(entry.status):
        if definition.session_id is not None:
            check_agent_watch(definition)
        check_host_definition(ctx, definition)
        check_grant(ctx, definition, Action.MANAGE)
        check_room(ctx, entry.watcher_id, proposal=entry.status is WatcherStatus.PROPOSED)
        if entry.status is WatcherStatus.ACTIVE:
            check_cap(ctx, entry)
    return ctx.ok(
        {**watcher_view(entry), "imported": True},
        registry=((entry.watcher_id, entry),),
        watchers=(WatcherWrite(entry.watcher_id, entry.source_id, entry),),
        lifecycle=(lifecycle_of(entry),),
        definitions=(entry,),
    )
