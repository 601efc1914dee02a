"""The ``watchers`` record (``schemas/watcher.v2.avsc``; v1 still read): a definition re-keyed by
source id for the evaluator and the ticker, with status, revision and routing fields.

Owns :func:`encode_watcher` and :class:`Watch` (routing fields decoded at once; the definition,
sealed under the subject's data key, opened once per version on first use, and
:class:`ErasedError` once that key is shredded).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from pipeline.records.codec import Codec, decoded
from pipeline.records.sealing import Sealer, open_definition, seal_definition
from pipeline.rules.authz import AuthzDecision, Grant
from pipeline.rules.budgets import BudgetCaps, BudgetScope
from pipeline.rules.commands.model import RegistryEntry
from pipeline.rules.definition import WatcherDefinition, parse_stored
from pipeline.rules.errors import ErasedError
from pipeline.rules.lifecycle import WatcherStatus, is_closed
from pipeline.rules.sources import EventSource

__all__ = ["WATCHER", "Watch", "decode_watch", "encode_watcher"]

WATCHER: Final = "watcher"


def encode_watcher(codec: Codec, sealer: Sealer, entry: RegistryEntry) -> bytes:
    source = entry.definition().source
    return codec.encode(
        WATCHER,
        {
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
            "definition": None,
            "sealed": seal_definition(
                sealer,
                WATCHER,
                entry.tenant_id,
                entry.user_id,
                entry.watcher_id,
                entry.version,
                entry.definition_json,
            ),
        },
    )


@dataclass(slots=True)
class Watch:
    """One watcher as the evaluator and ticker hold it: routing fields now, the definition on
    first use."""

    key: str
    parts: tuple[str, str, str]
    source_id: str
    event_type: str | None
    version: int
    revision: int
    status: WatcherStatus
    activated_at: datetime | None
    definition_json: str | None
    sealed: bytes | None = None  # the definition, sealed; opened on first use
    sealer: Sealer | None = None
    _definition: WatcherDefinition | None = None
    # The evaluator's budget scope and effective caps, worked out on first charge, tagged with
    # the operator defaults they were filled from.
    budget: tuple[BudgetCaps, BudgetScope, BudgetCaps] | None = None
    # The last allow, with the exact grants tuple it was decided from and the grant that gave
    # it: it holds while that tuple is current and the grant has not ended (allows only ever
    # end with time), so it is reused rather than decided again per input.
    allowed: tuple[tuple[Grant, ...], Grant, AuthzDecision] | None = None

    @property
    def definition(self) -> WatcherDefinition:
        """The compiled definition of this version, decoded once (raises ``DefinitionError``,
        or :class:`ErasedError` when its sealed text no longer opens)."""
        if self._definition is None:
            if self.definition_json is None:
                if self.sealed is None or self.sealer is None:
                    raise ErasedError(f"watcher {self.key} has no definition")
                self.definition_json = open_definition(
                    self.sealer,
                    WATCHER,
                    {
                        "tenant_id": self.parts[0],
                        "user_id": self.parts[1],
                        "watcher_id": self.parts[2],
                        "version": self.version,
                        "sealed": self.sealed,
                    },
                )
            parsed = parse_stored(self.definition_json)
            if parsed.version != self.version:
                parsed = parsed.with_version(self.version)
            self._definition = parsed
            self.definition_json = None  # the model holds it now
            self.sealed = None
        return self._definition

    @property
    def closed(self) -> bool:
        return is_closed(self.status)


def decode_watch(codec: Codec, sealer: Sealer, key: str, data: bytes) -> Watch:
    """Routing fields now; the definition (sealed) is opened on first use."""
    value = decoded(codec, WATCHER, data)
    return Watch(
        key=key,
        parts=(value["tenant_id"], value["user_id"], value["watcher_id"]),
        source_id=value["source_id"],
        event_type=value["event_type"] if value["source_kind"] == "event" else None,
        version=value["version"],
        revision=value["revision"],
        status=WatcherStatus(value["status"]),
        activated_at=value["activated_at"],
        definition_json=value["definition"],
        sealed=value.get("sealed"),
        sealer=sealer,
    )
