"""The ``grant`` record (``schemas/grant.v1.avsc``): a stored grant, keyed by grant id on the
compacted ``grants`` topic that every process reads whole."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipeline.records.codec import Codec, decoded
from pipeline.rules.authz import Action, Grant
from pipeline.rules.commands.model import GrantRecord
from pipeline.rules.instants import utc

__all__ = ["GRANT", "decode_grant", "encode_grant", "grant_from_value", "grant_value"]

GRANT: Final = "grant"


def grant_value(record: GrantRecord) -> dict[str, Any]:
    g = record.grant
    return {
        "grant_id": g.grant_id,
        "tenant_id": g.tenant_id,
        "user_id": g.user_id,
        "purpose": g.purpose,
        "sources": sorted(g.sources),
        "tools": sorted(g.tools),
        "targets": sorted(g.targets),
        "actions": sorted(a.value for a in g.actions),
        "until": g.until,
        "created_at": record.created_at,
        "created_by": record.created_by,
    }


def grant_from_value(value: Mapping[str, Any]) -> GrantRecord:
    fields = {k: value[k] for k in ("grant_id", "tenant_id", "user_id", "purpose", "until")}
    grant = Grant(
        **fields,
        sources=frozenset(value["sources"]),
        tools=frozenset(value["tools"]),
        targets=frozenset(value["targets"]),
        actions=frozenset(Action(a) for a in value["actions"]),
    )
    return GrantRecord(grant, utc(value["created_at"]), value["created_by"])


def encode_grant(codec: Codec, record: GrantRecord) -> bytes:
    return codec.encode(GRANT, grant_value(record))


def decode_grant(codec: Codec, data: bytes) -> GrantRecord:
    return grant_from_value(decoded(codec, GRANT, data))
