"""Whose data key seals what: the owners of data keys and the rule that picks one (DESIGN §10
"Erasure's reach").

Owns :class:`KeyOwner` (a subject, or one watcher version of it) with its record key on the
compacted ``keys`` topic, and :func:`evidence_owner`: evidence is sealed under its watcher version's
key (``cancel`` shreds it alone), everything else under the subject's (erasure shreds all). Leaves
out keys and encryption (``pipeline.crypto``) and which fields are sealed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import canonical_json, subject_key

__all__ = [
    "ERASED",
    "KeyOwner",
    "KeyScope",
    "evidence_owner",
    "parse_owner",
    "subject_owner",
]

ERASED: Final = "erased"
"""What every reader says of a field whose data key is gone."""


class KeyScope(StrEnum):
    SUBJECT = "subject"
    WATCHER = "watcher"  # one watcher version


@dataclass(frozen=True, slots=True)
class KeyOwner:
    """Who a data key belongs to: a subject, or (``watcher_id`` and ``version``) one watcher
    version of that subject."""

    tenant_id: str
    user_id: str
    watcher_id: str | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        if (self.watcher_id is None) != (self.version is None):
            raise DefinitionError("a watcher key owner names both the watcher and its version")

    @property
    def scope(self) -> KeyScope:
        return KeyScope.SUBJECT if self.watcher_id is None else KeyScope.WATCHER

    @property
    def subject_key(self) -> str:
        return subject_key(self.tenant_id, self.user_id)

    @property
    def topic_key(self) -> str:
        """The ``keys`` record key of this owner."""
        if self.watcher_id is None:
            return self.subject_key
        parts = [self.tenant_id, self.user_id, self.watcher_id, str(self.version)]
        return canonical_json(parts, "key owner").decode("utf-8")

    def of_subject(self, tenant_id: str, user_id: str) -> bool:
        return self.tenant_id == tenant_id and self.user_id == user_id


def subject_owner(tenant_id: str, user_id: str) -> KeyOwner:
    return KeyOwner(tenant_id, user_id)


def evidence_owner(tenant_id: str, user_id: str, watcher_id: str, version: int) -> KeyOwner:
    """The owner of a watcher version's evidence key (receipts and tick payloads)."""
    return KeyOwner(tenant_id, user_id, watcher_id, version)


def parse_owner(text: str) -> KeyOwner:
    """The owner a ``keys`` record key names; anything else is a :class:`DefinitionError`."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise DefinitionError("not a JSON array", "keys key") from None
    if (
        not isinstance(value, list)
        or len(value) not in (2, 4)
        or not all(isinstance(part, str) for part in value)
    ):
        raise DefinitionError("a keys key is an array of 2 or 4 strings", "keys key")
    if len(value) == 2:
        owner = KeyOwner(value[0], value[1])
    else:
        version = value[3]
        if not version.isdigit() or len(version) > 19:
            raise DefinitionError("the version is a decimal number", "keys key")
        owner = KeyOwner(value[0], value[1], value[2], int(version))
    if owner.topic_key != text:
        raise DefinitionError("not in RFC 8785 canonical form", "keys key")
    return owner
