"""The ``registry`` record (``schemas/registry_entry.v2.avsc``; v1 still read): the command
processor's own record of one watcher, what caps, CAS and collapse decide on; keyed by watcher
key. The definition is sealed under the subject's data key; an entry whose key is gone does not
decode (:class:`~pipeline.rules.errors.ErasedError`): its watcher is erased."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.sealing import Sealer, open_definition, seal_definition
from pipeline.rules.commands.model import RegistryEntry
from pipeline.rules.instants import utc
from pipeline.rules.lifecycle import CloseReason, WatcherStatus

__all__ = ["REGISTRY_ENTRY", "decode_entry", "encode_entry", "entry_from_value", "entry_value"]

REGISTRY_ENTRY: Final = "registry_entry"


def entry_value(entry: RegistryEntry, sealer: Sealer) -> dict[str, Any]:
    return {
        "tenant_id": entry.tenant_id,
        "user_id": entry.user_id,
        "watcher_id": entry.watcher_id,
        "version": entry.version,
        "revision": entry.revision,
        "status": entry.status.value,
        "source_id": entry.source_id,
        "session_id": entry.session_id,
        "fingerprint": entry.fingerprint,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
        "activated_at": entry.activated_at,
        "closed_reason": None if entry.closed_reason is None else entry.closed_reason.value,
        "definition": None,
        "sealed": seal_definition(
            sealer,
            REGISTRY_ENTRY,
            entry.tenant_id,
            entry.user_id,
            entry.watcher_id,
            entry.version,
            entry.definition_json,
        ),
    }


def entry_from_value(value: Mapping[str, Any], sealer: Sealer) -> RegistryEntry:
    """The entry (:class:`ErasedError` when its sealed definition no longer opens)."""
    definition = open_definition(sealer, REGISTRY_ENTRY, value)
    reason = value.get("closed_reason")
    activated = value.get("activated_at")
    return RegistryEntry(
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=value["watcher_id"],
        version=int(value["version"]),
        revision=int(value["revision"]),
        status=WatcherStatus(value["status"]),
        source_id=value["source_id"],
        session_id=value.get("session_id"),
        fingerprint=value["fingerprint"],
        created_at=utc(value["created_at"]),
        updated_at=utc(value["updated_at"]),
        definition_json=definition,
        activated_at=None if activated is None else utc(activated),
        closed_reason=None if reason is None else CloseReason(reason),
    )


def encode_entry(codec: Codec, sealer: Sealer, entry: RegistryEntry) -> bytes:
    return codec.encode(REGISTRY_ENTRY, entry_value(entry, sealer))


def decode_entry(codec: Codec, sealer: Sealer, data: bytes) -> RegistryEntry:
    return entry_from_value(decoded(codec, REGISTRY_ENTRY, data), sealer)
