"""The evaluator's write side in one native call per batch (DESIGN §10 "Compiled hot path").

Owns :func:`written` and :class:`FusedWrites` (``vigil_native.write_evaluations``, with the
ciphers the key ring hands over) and :func:`encoded`, the Python encoders they are held to byte
for byte; leaves producing, the transaction and the key ring itself to the evaluator (``loop``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pipeline.crypto import KeyRing
from pipeline.kafka.serde import AvroCodec
from pipeline.records.codec import Codec, json_text
from pipeline.records.outbox_entry import OUTBOX_ENTRY, encode_outbox_entry
from pipeline.records.receipt import RECEIPT, encode_receipt
from pipeline.records.sealing import Sealer
from pipeline.records.watcher import Watch
from pipeline.records.watcher_state import WATCHER_STATE, encode_state
from pipeline.rules.data_keys import evidence_owner, subject_owner
from pipeline.rules.evaluation import Evaluation
from pipeline.rules.native import NATIVE
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.receipts import Receipt
from pipeline.rules.retention import FAR_FUTURE, retain_until
from pipeline.rules.watcher_state import AppliedTrigger, WatcherState

__all__ = ["FusedItem", "FusedWrites", "Written", "encoded", "written"]

FusedItem = tuple[
    tuple[str, str, str], str, Receipt, WatcherState | None, OutboxEntry | None, timedelta
]
"""One evaluation: the watcher's key parts, its source id, the receipt, the next state (None:
unchanged, not written), the outbox entry if any, and the watcher's evidence retention."""

Written = tuple[bytes | None, bytes, bytes | None]
"""An evaluation's watcher-state (None: unchanged), receipt and outbox entry (None: none)."""

_RECORDS = (Receipt, WatcherState, AppliedTrigger, OutboxEntry)
"""The named tuples the fused step reads by position (it checks their ``_fields`` per batch)."""


def encoded(codec: Codec, sealer: Sealer, item: FusedItem, now: datetime) -> Written:
    """One evaluation's records written by the Python encoders: the Python path, what the
    fused step leaves, and the specification the fused step is held to."""
    parts, source_id, receipt, state, entry, retention = item
    text = json_text(receipt.trigger, "trigger")
    data = None
    if state is not None:
        checkpoint = state.checkpoint
        same = checkpoint is not None and checkpoint.trigger_key == receipt.trigger_key
        data = encode_state(codec, parts, source_id, state, now, text if same else None)
    until = retain_until(receipt.evaluated_at, retention)
    value = encode_receipt(codec, sealer, receipt, source_id, text, until)
    sealed = None if entry is None else encode_outbox_entry(codec, sealer, entry, text)
    return data, value, sealed


def written(
    fused: FusedWrites | None,
    codec: Codec,
    sealer: Sealer,
    decided: Sequence[tuple[Watch, WatcherState, Evaluation]],
    now: datetime,
) -> list[Written]:
    """Each decided evaluation's records (watch, the state it was evaluated on, the result):
    from one fused call when there is one, by the Python encoders where it leaves one (or on
    the Python path, ``fused`` None)."""
    items: list[FusedItem] = [
        (
            watch.parts,
            watch.source_id,
            result.receipt,
            None if result.next_state is state else result.next_state,
            result.outbox,
            watch.definition.privacy.evidence_retention,
        )
        for watch, state, result in decided
    ]
    answers = [None] * len(items) if fused is None or not items else fused.write(items, now)
    return [
        encoded(codec, sealer, item, now) if answer is None else answer
        for item, answer in zip(items, answers, strict=True)
    ]


class FusedWrites:
    """One ``write_evaluations`` call per batch, with the codec's native writers: for each
    evaluation, the watcher-state, receipt and outbox entry as ``encode_state``,
    ``encode_receipt`` and ``encode_outbox_entry`` write them — field maps, RFC 8785 content,
    the seal's identity, AES-256-GCM under the cipher the :class:`KeyRing` hands over for each
    owner, the Avro bytes. An evaluation it does not write the plain way comes back None and is
    written by :func:`encoded`, whose bytes or exception stand."""

    __slots__ = ("_headers", "_memo", "_native", "_ring", "_writers")

    def __init__(
        self,
        native: Any,
        writers: tuple[Any, Any, Any],
        headers: tuple[bytes, bytes, bytes],
        ring: KeyRing,
    ) -> None:
        self._native = native
        self._writers = writers
        self._headers = headers
        self._ring = ring
        self._memo = native.CipherMemo()  # owner → cipher while the ring is unchanged

    @classmethod
    def of(cls, codec: AvroCodec, ring: KeyRing) -> FusedWrites | None:
        """The fused step, or None on the Python path (or when a writer is not native)."""
        if NATIVE is None:
            return None
        receipt, state, outbox = (codec.newest(t) for t in (RECEIPT, WATCHER_STATE, OUTBOX_ENTRY))
        writers = (receipt.writer, state.writer, outbox.writer)
        if not all(isinstance(writer, NATIVE.Writer) for writer in writers):
            return None
        return cls(NATIVE, writers, (receipt.header, state.header, outbox.header), ring)

    def write(
        self, items: Sequence[FusedItem], now: datetime, nonce: bytes | None = None
    ) -> list[Written | None]:
        """Each item's bytes, or None where the Python path writes it (``nonce``: tests only).
        An error the key ring raises for an owner (a KEK not configured) stands."""
        answers: list[Written | None] | None = self._native.write_evaluations(
            list(items),
            self._writers,
            self._headers,
            _RECORDS,
            self._cipher_of,
            self._memo,
            self._ring.generation,
            FAR_FUTURE,
            now,
            nonce,
        )
        return [None] * len(items) if answers is None else answers

    def _cipher_of(self, tenant_id: str, user_id: str, watcher_id: str | None, version: Any) -> Any:
        """The cipher of a receipt's owner (the watcher version's evidence key) or, without a
        watcher, of an outbox entry's (the subject's key); None when it has no key."""
        if watcher_id is None:
            return self._ring.sealing_cipher(subject_owner(tenant_id, user_id))
        return self._ring.sealing_cipher(evidence_owner(tenant_id, user_id, watcher_id, version))
