"""The ``definition-log`` record (``schemas/definition_log.v1.avsc``): every accepted definition
version, who asserted it and when — the history replay needs once compaction has dropped older
versions from ``registry`` and ``watchers`` (DESIGN §10)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec
from pipeline.rules.commands.model import Command, RegistryEntry

__all__ = ["DEFINITION_LOG", "encode_definition_log"]

DEFINITION_LOG: Final = "definition_log"


def encode_definition_log(
    codec: Codec, entry: RegistryEntry, command: Command, at: datetime
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
            "definition": entry.definition_json,
        },
    )
