"""Key rings for tests: real :class:`~pipeline.crypto.ring.KeyRing` s under the test KEK.

:func:`ring_with` makes the named owners' data keys; :class:`OpenRing` makes a key for any owner
the moment something is sealed under it, for record tests that do not care whose key it is.
Both are real rings — sealing is AES-256-GCM — so a record test still proves the bytes hold
ciphertext, not plaintext.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.serde import default_codec
from pipeline.records.sealing import identity, seal_definition, seal_fields
from pipeline.rules.data_keys import KeyOwner, subject_owner
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.keys import canonical_json

__all__ = ["OpenRing", "ring_with", "sealed_command_value", "sealed_definition"]

_MADE = datetime(2026, 1, 1, tzinfo=UTC)


def ring_with(*owners: KeyOwner, keks: KeyEncryptionKeys | None = None) -> KeyRing:
    ring = KeyRing(keks or KeyEncryptionKeys.load(), default_codec())
    for owner in owners:
        ring.create(owner, _MADE)
    return ring


class OpenRing(KeyRing):
    """A ring that makes a key for any owner on first seal (never for open)."""

    def __init__(self, keks: KeyEncryptionKeys | None = None) -> None:
        super().__init__(keks or KeyEncryptionKeys.load(), default_codec())

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        if self.record(owner) is None:
            self.create(owner, _MADE)
        return super().seal(owner, aad, plaintext)


def sealed_definition(ring: KeyRing, definition: WatcherDefinition) -> bytes:
    """A ``watchers`` record's sealed definition, as the command processor writes it."""
    assert definition.version is not None
    tenant, user, watcher_id = definition.watcher_key
    text = canonical_json(definition.to_json()).decode()
    return seal_definition(ring, "watcher", tenant, user, watcher_id, definition.version, text)


def sealed_command_value(ring: KeyRing, value: Mapping[str, Any]) -> dict[str, Any]:
    """A decoded ``command`` value with its definition and text sealed as an edge seals them
    (whatever they hold: hostile text too); one that cannot be sealed is left as it is."""
    content = {name: value.get(name) for name in ("definition", "text")}
    if all(item is None for item in content.values()):
        return dict(value)
    tenant, user = str(value.get("tenant_id")), str(value.get("user_id"))
    aad = identity("command", str(value.get("request_id")), tenant, user)
    try:
        sealed = seal_fields(ring, subject_owner(tenant, user), aad, content)
    except Exception:  # text no JSON can carry (a lone surrogate): stays unsealed, refused
        return dict(value)
    return {**value, "definition": None, "text": None, "sealed": sealed}
