"""Sealed subject fields: the :class:`Sealer` record modules write through, like the ``Codec``.

A record's subject fields are gathered into one JSON object sealed (AEAD, the record's identity
as associated data) into its ``sealed`` field; read back it is absent (an older record: the
plaintext stands), :data:`WITHHELD` (no key: nothing kept), or opens or reads as erased. Leaves
out keys and ciphers (``pipeline.crypto``) and whose key seals what (``rules.data_keys``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

from pipeline.rules.data_keys import KeyOwner, subject_owner
from pipeline.rules.errors import ErasedError, SerdeError
from pipeline.rules.keys import canonical_json, encode_fields

__all__ = [
    "WITHHELD",
    "Sealer",
    "definition_identity",
    "identity",
    "open_definition",
    "open_fields",
    "seal_definition",
    "seal_fields",
    "seal_text",
]

WITHHELD: Final = b""
"""The ``sealed`` value of a record whose owner had no data key when it was written."""


class Sealer(Protocol):
    """Seals bytes under an owner's data key and opens them by the key id they carry."""

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        """The sealed value, or None when ``owner`` has no key (erased, or never made)."""
        ...

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        """The plaintext, or None when its key is gone or the value is not authentic."""
        ...


def identity(record_type: str, *parts: str) -> bytes:
    """Associated data binding a sealed value to its record: length-prefixed fields."""
    return encode_fields((record_type, *parts))


def seal_text(sealer: Sealer, owner: KeyOwner, aad: bytes, text: str) -> bytes:
    """Seal JSON text the caller already has (the hot path); :data:`WITHHELD` without a key."""
    sealed = sealer.seal(owner, aad, text.encode("utf-8"))
    return WITHHELD if sealed is None else sealed


def seal_fields(sealer: Sealer, owner: KeyOwner, aad: bytes, fields: Mapping[str, Any]) -> bytes:
    """Seal ``fields`` as RFC 8785 JSON; :data:`WITHHELD` when the owner has no key."""
    sealed = sealer.seal(owner, aad, canonical_json(dict(fields), "sealed"))
    return WITHHELD if sealed is None else sealed


def open_fields(sealer: Sealer, aad: bytes, sealed: bytes) -> dict[str, Any] | None:
    """The sealed fields, or None when they read as erased (withheld, or the key is gone)."""
    if not sealed:
        return None
    data = sealer.open(aad, sealed)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except (TypeError, ValueError, RecursionError):
        raise SerdeError("sealed fields are not JSON") from None
    if not isinstance(value, dict):
        raise SerdeError("sealed fields are not a JSON object")
    return value


# -- a definition, as ``watchers``, ``registry`` and ``definition-log`` carry it --------------


def definition_identity(
    record_type: str, tenant_id: str, user_id: str, watcher_id: str, version: int
) -> bytes:
    """The associated data of a sealed definition in a ``record_type`` record (``watcher``,
    ``registry_entry``, ``definition_log``)."""
    return identity(record_type, tenant_id, user_id, watcher_id, str(version))


def seal_definition(
    sealer: Sealer,
    record_type: str,
    tenant_id: str,
    user_id: str,
    watcher_id: str,
    version: int,
    definition_json: str,
) -> bytes:
    """A definition's canonical JSON sealed under its subject's key (withheld without one)."""
    aad = definition_identity(record_type, tenant_id, user_id, watcher_id, version)
    owner = subject_owner(tenant_id, user_id)
    return seal_fields(sealer, owner, aad, {"definition": definition_json})


def open_definition(
    sealer: Sealer,
    record_type: str,
    value: Mapping[str, Any],
    version_field: str = "version",
) -> str:
    """The definition JSON a decoded record carries, sealed or (older records) plain;
    :class:`ErasedError` when its key is gone."""
    sealed = value.get("sealed")
    if sealed is None:
        text: str | None = value.get("definition")
        if text is None:
            raise ErasedError("the definition is missing")
        return text
    aad = definition_identity(
        record_type,
        value["tenant_id"],
        value["user_id"],
        value["watcher_id"],
        int(value[version_field]),
    )
    opened = open_fields(sealer, aad, sealed)
    found = None if opened is None else opened.get("definition")
    if not isinstance(found, str):
        raise ErasedError(f"the definition of {value['watcher_id']!r} is erased")
    return found
