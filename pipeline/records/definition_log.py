"""The ``definition-log`` record (``schemas/definition_log.v3.avsc``; v1, v2 still read): every
accepted definition version, who asserted it and when, and audit records (a ``note``).

Owns :class:`LoggedDefinition` and its Avro mapping: the history replay needs once compaction
has dropped older versions (DESIGN §10); the definition is sealed under the subject's data key,
so after erasure replay reads it as erased.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.sealing import Sealer, open_definition, seal_definition
from pipeline.rules.commands.model import Command, RegistryEntry
from pipeline.rules.errors import ErasedError

__all__ = ["DEFINITION_LOG", "LoggedDefinition", "decode_definition_log", "encode_definition_log"]

DEFINITION_LOG: Final = "definition_log"


@dataclass(frozen=True, slots=True)
class LoggedDefinition:
    """One accepted version; ``definition_json`` None when it is erased."""

    tenant_id: str
    user_id: str
    watcher_id: str
    version: int
    at: datetime
    definition_json: str | None
    note: str | None = None  # an audit record: the version unchanged, this says what was done

    @property
    def erased(self) -> bool:
        return self.definition_json is None


def encode_definition_log(
    codec: Codec,
    sealer: Sealer,
    entry: RegistryEntry,
    command: Command,
    at: datetime,
    note: str | None = None,
) -> bytes:
    return codec.encode(
        DEFINITION_LOG,
        {
            "tenant_id": entry.tenant_id,
            "user_id": entry.user_id,
            "watcher_id": entry.watcher_id,
            "version": entry.version,
            "revision": entry.revision,
            "request_id": command.request_id,
            "principal": command.principal.name,
            "role": command.principal.role.value,
            "at": at,
            "definition": None,
            "sealed": seal_definition(
                sealer,
                DEFINITION_LOG,
                entry.tenant_id,
                entry.user_id,
                entry.watcher_id,
                entry.version,
                entry.definition_json,
            ),
            "note": note,
        },
    )


def decode_definition_log(codec: Codec, sealer: Sealer, data: bytes) -> LoggedDefinition:
    value = decoded(codec, DEFINITION_LOG, data)
    try:
        text: str | None = open_definition(sealer, DEFINITION_LOG, value)
    except ErasedError:
        text = None
    return LoggedDefinition(
        tenant_id=value["tenant_id"],
        user_id=value["user_id"],
        watcher_id=value["watcher_id"],
        version=int(value["version"]),
        at=value["at"],
        definition_json=text,
        note=value.get("note"),
    )
