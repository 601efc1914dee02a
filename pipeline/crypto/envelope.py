"""One sealed field on the wire: AES-256-GCM under a data key, the key's id in front.

Layout: version byte ``0x01``, the 16-byte key id, a 12-byte nonce, ciphertext and tag. The
associated data is the record's identity, so a sealed value copied elsewhere does not open; the
key id tells "erased" (no such key any more) from "ours". Leaves out where keys come from
(``ring``) and what is sealed (records).
"""

from __future__ import annotations

import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KEY_ID_BYTES", "OVERHEAD", "VERSION", "key_id_of", "open_sealed", "seal"]

VERSION: Final = 1
KEY_ID_BYTES: Final = 16
_NONCE: Final = 12
_TAG: Final = 16
_HEAD: Final = 1 + KEY_ID_BYTES
OVERHEAD: Final = _HEAD + _NONCE + _TAG
_VERSION_BYTE: Final = bytes([VERSION])


def seal(aead: AESGCM, key_id: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = os.urandom(_NONCE)
    return b"".join((_VERSION_BYTE, key_id, nonce, aead.encrypt(nonce, plaintext, aad)))


def key_id_of(sealed: bytes) -> bytes | None:
    """The id of the key ``sealed`` needs, or None when it is not a sealed value."""
    if len(sealed) < OVERHEAD or sealed[0] != VERSION:
        return None
    return bytes(sealed[1:_HEAD])


def open_sealed(aead: AESGCM, sealed: bytes, aad: bytes) -> bytes | None:
    """The plaintext, or None when ``sealed`` is not authentic for ``aad`` under this key."""
    if len(sealed) < OVERHEAD:
        return None
    nonce = sealed[_HEAD : _HEAD + _NONCE]
    try:
        return aead.decrypt(nonce, sealed[_HEAD + _NONCE :], aad)
    except InvalidTag:
        return None
