"""The data keys one process knows: the ``keys`` table, unwrapped on demand, and the sealer.

Owns :class:`KeyRing`: fed the ``keys`` records, it seals under an owner's current key and opens
by key id; a tombstone forgets the key at once; unwrapped keys live in a bounded cache; the
command processor also creates and re-wraps keys here. Thread-safe; no key material logged.
Leaves out reading the topic (``pipeline.runtime``) and what records seal (``pipeline.records``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final, TypeVar

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pipeline.crypto.envelope import KEY_ID_BYTES, key_id_of, open_sealed, seal
from pipeline.crypto.kek import KEY_BYTES, KeyEncryptionKeys
from pipeline.records.codec import Codec
from pipeline.records.data_key import DataKeyRecord, decode_data_key, encode_data_key
from pipeline.rules.data_keys import KeyOwner
from pipeline.rules.errors import ConfigError, SerdeError
from pipeline.rules.keys import encode_fields
from pipeline.rules.native import NATIVE

__all__ = ["DEFAULT_CACHE", "KeyRing", "wrap_context"]

log = logging.getLogger(__name__)

DEFAULT_CACHE: Final = 65_536
CIPHER_CACHE: Final = 16_384  # ~2.5 KiB each: a cipher per evidence key of 10,000+ watchers
_WRAP: Final = "vigil.keys.v1"
_WARNED_LIMIT: Final = 1024
_K = TypeVar("_K")
_V = TypeVar("_V")


def wrap_context(topic_key: str, key_id: bytes) -> bytes:
    """Associated data of a wrapped key: its ``keys`` record key and its id."""
    return encode_fields((_WRAP, topic_key, key_id.hex()))


class KeyRing:
    """Data keys by owner and by id; a bounded cache of the unwrapped ones.

    Fed by the runtime's table view or a reader's scan (:meth:`apply`); a tombstone forgets the key,
    so from the next batch on nothing sealed under it opens in this process. Unwrapped raw keys live
    in a bounded cache (oldest out first) and the ciphers made from them in a smaller one; wrapped
    records are as many as the topic holds. One lock: delivery's ``in_app`` adapter seals on sender
    threads while the poll thread applies the table. Log lines name owners, key ids and KEK ids
    only. On the native path a cipher is ``vigil_native.Cipher``: the same envelope, sealed in one
    call.
    """

    __slots__ = (
        "_aeads",
        "_by_id",
        "_by_subject",
        "_cache_size",
        "_codec",
        "_keks",
        "_lock",
        "_older",
        "_raw",
        "_records",
        "_sealing",
        "_warned",
        "generation",
        "undecodable",
    )

    def __init__(
        self, keks: KeyEncryptionKeys, codec: Codec, *, cache_size: int = DEFAULT_CACHE
    ) -> None:
        if cache_size < 1:
            raise ValueError("the key cache holds at least one key")
        self._keks = keks
        self._codec = codec
        self._cache_size = cache_size
        self._records: dict[str, DataKeyRecord] = {}  # topic key → record
        self._by_id: dict[bytes, str] = {}  # key id → topic key
        self._by_subject: dict[tuple[str, str], set[str]] = {}
        self._older: dict[tuple[str, str], set[str]] = {}  # wrapped under an older KEK
        self._raw: dict[bytes, bytes] = {}  # bounded: unwrapped keys by key id
        self._aeads: dict[bytes, Any] = {}  # bounded, smaller: their ciphers (_aead)
        self._sealing: dict[KeyOwner, bytes] = {}  # bounded: owner → key id
        self._warned: set[bytes] = set()
        self._lock = threading.RLock()
        self.undecodable = 0
        self.generation = 0
        """Counts the ``keys`` records taken in: a cipher remembered under one generation
        (``consumers.evaluator.fused``) is asked again under the next."""

    @property
    def keks(self) -> KeyEncryptionKeys:
        return self._keks

    # -- the keys table -------------------------------------------------------------------

    def apply(self, topic_key: str, raw: bytes | None) -> None:
        """Take in one ``keys`` record (None: a tombstone, the key is shredded)."""
        with self._lock:
            self._apply(topic_key, raw)

    def _apply(self, topic_key: str, raw: bytes | None) -> None:
        self.generation += 1
        old = self._records.pop(topic_key, None)
        if old is not None:
            self._forget(old)
        if raw is None:
            return
        try:
            record = decode_data_key(self._codec, raw)
        except SerdeError as exc:
            self.undecodable += 1
            log.error("keys record %s is unreadable (its data stays sealed): %s", topic_key, exc)
            return
        if record.owner.topic_key != topic_key or len(record.key_id) != KEY_ID_BYTES:
            self.undecodable += 1
            log.error("keys record %s does not match its key: ignored", topic_key)
            return
        self._records[topic_key] = record
        self._by_id[record.key_id] = topic_key
        owner = record.owner
        self._by_subject.setdefault((owner.tenant_id, owner.user_id), set()).add(topic_key)
        if record.kek_id != self._keks.newest:
            self._older.setdefault((owner.tenant_id, owner.user_id), set()).add(topic_key)

    def forget(self, tenant_id: str, user_id: str) -> None:
        """Drop every key of one subject (before reading its keys afresh)."""
        with self._lock:
            for topic_key in list(self._by_subject.get((tenant_id, user_id), ())):
                self._apply(topic_key, None)

    def load(self, records: Iterable[tuple[str, bytes | None]]) -> None:
        for topic_key, raw in records:
            self.apply(topic_key, raw)

    def _forget(self, record: DataKeyRecord) -> None:
        self._by_id.pop(record.key_id, None)
        self._aeads.pop(record.key_id, None)
        self._raw.pop(record.key_id, None)
        self._sealing.pop(record.owner, None)
        owner = record.owner
        subject, topic_key = (owner.tenant_id, owner.user_id), owner.topic_key
        for index in (self._by_subject, self._older):
            keys = index.get(subject)
            if keys is not None:
                keys.discard(topic_key)
                if not keys:
                    del index[subject]

    def __len__(self) -> int:
        return len(self._records)

    def record(self, owner: KeyOwner) -> DataKeyRecord | None:
        return self._records.get(owner.topic_key)

    def owners(self, tenant_id: str, user_id: str, watcher_id: str | None = None) -> list[KeyOwner]:
        """The owners with a key under this subject (of one watcher's versions, if named)."""
        keys = self._by_subject.get((tenant_id, user_id), ())
        found = [self._records[k].owner for k in keys]
        if watcher_id is not None:
            found = [o for o in found if o.watcher_id == watcher_id]
        return sorted(found, key=lambda o: o.topic_key)

    def older_owners(self, tenant_id: str, user_id: str) -> list[KeyOwner]:
        """The owners under this subject whose key an older KEK wraps (what
        :meth:`rewrapped` renews), by topic key: kept as records come and go, so a subject
        with thousands of keys costs nothing once they are all under the newest KEK."""
        with self._lock:
            keys = sorted(self._older.get((tenant_id, user_id), ()))
            return [self._records[k].owner for k in keys]

    def __iter__(self) -> Iterator[DataKeyRecord]:
        return iter(self._records.values())

    # -- the sealer -----------------------------------------------------------------------

    def seal(self, owner: KeyOwner, aad: bytes, plaintext: bytes) -> bytes | None:
        """Sealed under ``owner``'s key; None when it has none. A key that exists but does not
        unwrap here (its KEK is not configured) is a :class:`ConfigError`: writing the record
        without its content would lose data that is not erased."""
        found = self._sealing_key(owner)
        if found is None:
            return None
        key_id, aead = found
        if type(aead) is AESGCM:
            return seal(aead, key_id, plaintext, aad)
        sealed: bytes = aead.seal(plaintext, aad)
        return sealed

    def sealing_cipher(self, owner: KeyOwner) -> Any | None:
        """The cipher :meth:`seal` would seal under for ``owner`` (a ``vigil_native.Cipher`` on
        the native path, which the evaluator's fused write step seals with), None when it has
        no key; a key that does not unwrap here is a :class:`ConfigError`, as in :meth:`seal`."""
        found = self._sealing_key(owner)
        return None if found is None else found[1]

    def _sealing_key(self, owner: KeyOwner) -> tuple[bytes, Any] | None:
        with self._lock:
            key_id = self._sealing.get(owner)
            if key_id is None:
                record = self._records.get(owner.topic_key)
                if record is None:
                    return None
                key_id = record.key_id
                _bounded_put(self._sealing, owner, key_id, self._cache_size)
            aead = self._aead(key_id)
            if aead is None:
                kek_id = self._records[owner.topic_key].kek_id
                raise ConfigError(
                    f"the data key of {owner.topic_key} is wrapped under key-encryption key "
                    f"{kek_id!r}, which this process does not have: add it to the KEKs"
                )
        return key_id, aead

    def open(self, aad: bytes, sealed: bytes) -> bytes | None:
        key_id = key_id_of(sealed)
        if key_id is None:
            return None
        with self._lock:
            aead = self._aead(key_id)
        if aead is None:
            return None
        if type(aead) is AESGCM:
            return open_sealed(aead, sealed, aad)
        opened: bytes | None = aead.open(sealed, aad)
        return opened

    def can_open(self, sealed: bytes) -> bool:
        """Whether the key ``sealed`` names is known here (no decryption)."""
        return self.owner_of(sealed) is not None

    def owner_of(self, sealed: bytes) -> KeyOwner | None:
        """Whose key ``sealed`` names, when this ring knows it (an audit's question)."""
        key_id = key_id_of(sealed)
        with self._lock:
            topic_key = None if key_id is None else self._by_id.get(key_id)
            return None if topic_key is None else self._records[topic_key].owner

    def _aead(self, key_id: bytes) -> Any:
        """The cipher of ``key_id`` (an ``AESGCM``, or a ``vigil_native.Cipher`` on the native
        path), or None when it is not known or does not unwrap here."""
        found = self._aeads.get(key_id)
        if found is not None:
            return found
        key = self._raw.get(key_id) or self._unwrap(key_id)
        if key is None:
            return None
        aead = AESGCM(key) if NATIVE is None else NATIVE.Cipher(key, key_id)
        _bounded_put(self._aeads, key_id, aead, min(self._cache_size, CIPHER_CACHE))
        return aead

    def _unwrap(self, key_id: bytes) -> bytes | None:
        topic_key = self._by_id.get(key_id)
        if topic_key is None:
            return None
        record = self._records[topic_key]
        key = self._keks.unwrap(record.kek_id, record.wrapped, wrap_context(topic_key, key_id))
        if key is None:
            if key_id not in self._warned and len(self._warned) < _WARNED_LIMIT:
                self._warned.add(key_id)
                log.error(
                    "data key %s of %s does not unwrap under key-encryption key %r (is that KEK"
                    " configured?): its data reads as erased here",
                    key_id.hex(),
                    topic_key,
                    record.kek_id,
                )
            return None
        _bounded_put(self._raw, key_id, key, self._cache_size)
        return key

    # -- the writer's side (the command processor) ----------------------------------------

    def create(self, owner: KeyOwner, now: datetime) -> tuple[str, bytes]:
        """A fresh random data key for ``owner``, wrapped under the newest KEK: its ``keys``
        record key and value (also taken in here, so it seals at once)."""
        key_id = os.urandom(KEY_ID_BYTES)
        topic_key = owner.topic_key
        kek_id, wrapped = self._keks.wrap(os.urandom(KEY_BYTES), wrap_context(topic_key, key_id))
        raw = encode_data_key(self._codec, DataKeyRecord(owner, key_id, kek_id, wrapped, now))
        self.apply(topic_key, raw)
        return topic_key, raw

    def rewrapped(self, owner: KeyOwner) -> tuple[str, bytes] | None:
        """``owner``'s key wrapped again under the newest KEK (same key, same id), or None when
        it already is, or cannot be unwrapped here."""
        with self._lock:
            record = self._records.get(owner.topic_key)
        if record is None or record.kek_id == self._keks.newest:
            return None
        context = wrap_context(owner.topic_key, record.key_id)
        key = self._keks.unwrap(record.kek_id, record.wrapped, context)
        if key is None:
            return None
        kek_id, wrapped = self._keks.wrap(key, context)
        raw = encode_data_key(
            self._codec,
            DataKeyRecord(owner, record.key_id, kek_id, wrapped, record.created_at),
        )
        self.apply(owner.topic_key, raw)
        return owner.topic_key, raw

    def __repr__(self) -> str:
        return f"KeyRing({len(self._records)} keys, {len(self._raw)} unwrapped)"


def _bounded_put(cache: dict[_K, _V], key: _K, value: _V, size: int) -> None:
    while len(cache) >= size:
        del cache[next(iter(cache))]
    cache[key] = value
