"""The operator's key-encryption keys (KEKs): the one secret that unwraps every data key.

Owns :class:`KeyEncryptionKeys` (``ID:KEY`` entries from ``[privacy]``'s variable or file; new
wraps under the last one listed; AES-256-GCM with the ``keys`` record's identity as associated
data) and :func:`generate_kek_text`. A bad value is a one-line ``ConfigError``; key material is
never in a message, ``repr`` or log. Leaves out data keys and sealing (``ring``, ``envelope``).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.rules.errors import ConfigError

__all__ = ["DEFAULT_ENV", "KEY_BYTES", "KeyEncryptionKeys", "generate_kek_text"]

DEFAULT_ENV: Final = "VIGIL_MASTER_KEYS"
KEY_BYTES: Final = 32
_NONCE: Final = 12
_ID: Final = re.compile(r"^[A-Za-z0-9._-]{1,32}$")
_MAX_ENTRIES: Final = 16
_MAX_TEXT: Final = 4096


def _fix(source: str) -> str:
    return (
        f'{source}: set it to "ID:KEY" entries (`export {DEFAULT_ENV}="$(vigil keys generate)"`'
        " makes one)"
    )


class KeyEncryptionKeys:
    """Key-encryption keys by id, in rotation order: the last is the newest.

    Read once at a process's edge from the variable ``[privacy] master_key_env`` names (default
    ``VIGIL_MASTER_KEYS``) or from ``[privacy] master_key_file``: comma-separated ``ID:KEY``
    entries, ``KEY`` 32 random bytes in URL-safe base64. Every entry unwraps the data keys wrapped
    under it; append a new KEK to rotate, and drop an old one once the command processor has
    re-wrapped every data key under the newer.
    """

    __slots__ = ("_by_id", "_ids")

    def __init__(self, entries: Sequence[tuple[str, bytes]]) -> None:
        if not entries:
            raise ConfigError("no key-encryption key given")
        self._by_id: dict[str, AESGCM] = {}
        for kek_id, key in entries:
            if _ID.fullmatch(kek_id) is None or len(key) != KEY_BYTES:
                raise ConfigError(f"key-encryption key {kek_id!r}: an id and {KEY_BYTES} bytes")
            if kek_id in self._by_id:
                raise ConfigError(f"key-encryption key id {kek_id!r} is listed twice")
            self._by_id[kek_id] = AESGCM(key)
        self._ids = tuple(kek_id for kek_id, _ in entries)

    @classmethod
    def parse(cls, text: str, source: str = DEFAULT_ENV) -> KeyEncryptionKeys:
        """Entries ``ID:KEY,ID:KEY``; an error names the entry's position, never its value."""
        text = text.strip()
        if not text:
            raise ConfigError(f"{source} is empty: {_fix(source)}")
        if len(text) > _MAX_TEXT:
            raise ConfigError(f"{source} is too long: at most {_MAX_ENTRIES} entries")
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if len(parts) > _MAX_ENTRIES:
            raise ConfigError(f"{source}: at most {_MAX_ENTRIES} entries")
        entries: list[tuple[str, bytes]] = []
        for index, part in enumerate(parts, start=1):
            kek_id, sep, encoded = part.partition(":")
            if not sep or _ID.fullmatch(kek_id) is None:
                raise ConfigError(f"{source}: entry {index} is not ID:KEY; {_fix(source)}")
            try:
                key = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                key = b""
            if len(key) != KEY_BYTES:
                raise ConfigError(
                    f"{source}: entry {index} ({kek_id}) is not {KEY_BYTES} bytes of URL-safe"
                    " base64"
                )
            entries.append((kek_id, key))
        return cls(entries)

    @classmethod
    def load(
        cls,
        env: str = DEFAULT_ENV,
        *,
        file: Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> KeyEncryptionKeys:
        """From the variable ``env``, else ``file``; neither is a one-line :class:`ConfigError`."""
        values = os.environ if environ is None else environ
        text = values.get(env, "")
        if text.strip():
            return cls.parse(text, f"${env}")
        if file is not None:
            try:
                return cls.parse(file.expanduser().read_text(encoding="utf-8"), str(file))
            except OSError as exc:
                raise ConfigError(f"{file}: cannot read the key-encryption keys: {exc}") from None
        raise ConfigError(
            f"no key-encryption key: {_fix('$' + env)}; see README, Privacy and erasure"
        )

    @property
    def ids(self) -> tuple[str, ...]:
        return self._ids

    @property
    def newest(self) -> str:
        return self._ids[-1]

    def wrap(self, data_key: bytes, context: bytes) -> tuple[str, bytes]:
        """``data_key`` wrapped under the newest KEK: its id, and nonce + ciphertext + tag."""
        nonce = os.urandom(_NONCE)
        return self.newest, nonce + self._by_id[self.newest].encrypt(nonce, data_key, context)

    def unwrap(self, kek_id: str, wrapped: bytes, context: bytes) -> bytes | None:
        """The data key, or None when this process lacks that KEK or the bytes are not a key
        wrapped for ``context`` (fail-closed: nothing sealed under it opens)."""
        kek = self._by_id.get(kek_id)
        if kek is None or len(wrapped) <= _NONCE:
            return None
        try:
            key = kek.decrypt(wrapped[:_NONCE], wrapped[_NONCE:], context)
        except InvalidTag:
            return None
        return key if len(key) == KEY_BYTES else None

    def __repr__(self) -> str:
        return f"KeyEncryptionKeys(ids={list(self._ids)!r})"


def generate_kek_text(kek_id: str | None = None) -> str:
    """A fresh ``ID:KEY`` entry (the id defaults to today's date and a random suffix)."""
    if kek_id is None:
        kek_id = f"kek-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(3)}"
    if _ID.fullmatch(kek_id) is None:
        raise ConfigError(f"a key id is 1..32 of A-Z a-z 0-9 . _ -, not {kek_id!r}")
    key = base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii").rstrip("=")
    return f"{kek_id}:{key}"
