"""Key rings for tests: real :class:`~pipeline.crypto.ring.KeyRing` s under the test KEK.

:func:`ring_with` makes the named owners' data keys; :class:`OpenRing` makes a key for any owner
the moment something is sealed under it, for record tests that do not care whose key it is.
Both are real rings — sealing is AES-256-GCM — so a record test still proves the bytes hold
ciphertext, not plaintext.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.serde import default_codec
from pipeline.records.sealing import seal_definition
from pipeline.rules.data_keys import KeyOwner
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.keys import canonical_json

__all__ = ["OpenRing", "ring_with", "sealed_definition"]

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
