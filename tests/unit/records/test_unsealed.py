"""A record whose subject content arrives without its ``sealed`` field (issue 27): never read as
plaintext — a downgrade a forger could use and a copy erasure could not reach. An outbox entry
is refused (delivery dead-letters it); a notification's content reads as erased."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.kafka.serde import default_codec
from pipeline.records.codec import decoded
from pipeline.records.notification import (
    NOTIFICATION,
    NotificationKind,
    decode_notification,
    encode_notification,
)
from pipeline.records.outbox_entry import OUTBOX_ENTRY, decode_outbox_entry, encode_outbox_entry
from pipeline.rules.commands.immediate import immediate_entry
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import SerdeError
from tests.keyring import ring_with

pytestmark = pytest.mark.unit

NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
RING = ring_with(subject_owner("t", "u"))
CODEC = default_codec()


def test_an_outbox_entry_without_its_sealed_field_is_refused() -> None:
    entry = immediate_entry(
        tenant_id="t", user_id="u", verb="run", request_id="r1", chat="me", now=NOW,
        args=("job.sh",),
    )  # fmt: skip
    data = encode_outbox_entry(CODEC, RING, entry)
    assert decode_outbox_entry(CODEC, RING, data).args == ("job.sh",)  # sealed: reads
    value = decoded(CODEC, OUTBOX_ENTRY, data)
    forged = {**value, "sealed": None, "args": ["evil.sh"], "trigger": '{"kind": "request"}'}
    with pytest.raises(SerdeError, match="unsealed"):
        decode_outbox_entry(CODEC, RING, CODEC.encode(OUTBOX_ENTRY, forged))


def test_a_notification_without_its_sealed_field_reads_as_erased_never_as_plaintext() -> None:
    data = encode_notification(
        CODEC, RING, NotificationKind.NOTIFICATION, delivery_key="ab" * 32, tenant_id="t",
        user_id="u", watcher_id="w-1", session_id=None, created_at=NOW,
        content={"text": "the real text", "trigger": {"kind": "request"}},
    )  # fmt: skip
    assert decode_notification(CODEC, RING, data)["text"] == "the real text"
    value = decoded(CODEC, NOTIFICATION, data)
    forged = {**value, "sealed": None, "text": "plaintext a forger wrote", "trigger": "{}"}
    seen = decode_notification(CODEC, RING, CODEC.encode(NOTIFICATION, forged))
    assert (seen["text"], seen["trigger"], seen["erased"]) == (None, None, True)
