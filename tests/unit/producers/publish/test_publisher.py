from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pipeline.kafka.serde import default_codec
from pipeline.records.event import MAX_ID_BYTES, event_record
from pipeline.rules.errors import DefinitionError
from producers.publish.publisher import EventPublisher

pytestmark = pytest.mark.unit

AT = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_event_record_canonicalizes_payload_and_normalizes_instant() -> None:
    berlin = timezone(timedelta(hours=1))
    record = event_record(
        "ci.pipeline", "build.finished", "b-981", {"z": 1, "a": [True, None]},
        datetime(2026, 11, 29, 13, 0, tzinfo=berlin), cursor="981",
    )  # fmt: skip
    assert record["payload"] == '{"a":[true,null],"z":1}'
    assert record["observed_at"] == AT
    assert record["observed_at"].tzinfo == UTC
    assert record["cursor"] == "981"
    assert record["envelope_id"] is None
    _, decoded = default_codec().decode(default_codec().encode("event", record))
    assert decoded == record


def _nested(depth: int) -> dict[str, object]:
    value: dict[str, object] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"x": float("nan")}, "not finite"),
        ({"x": float("inf")}, "not finite"),
        ({"x": 2**53 + 1}, "larger than 9007199254740991"),
        ({1: "int key"}, "key is not a string"),
        ({"x": b"bytes"}, "unsupported type"),
        (_nested(65), "nested deeper than 64"),
        ([1, 2], "must be a JSON object"),
        ("text", "must be a JSON object"),
    ],
)
def test_payload_that_no_reader_would_take_is_refused(payload: object, why: str) -> None:
    with pytest.raises(DefinitionError, match=why) as caught:
        event_record("s", "t", "e", payload, AT)
    assert caught.value.field == "payload"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"source_id": ""}, "source_id"),
        ({"event_type": None}, "event_type"),
        ({"event_id": "x" * (MAX_ID_BYTES + 1)}, "event_id"),
        ({"cursor": ""}, "cursor"),
        ({"envelope_id": 5}, "envelope_id"),
        ({"observed_at": datetime(2026, 11, 29, 12, 0)}, "observed_at"),
    ],
)
def test_bad_field_is_refused_naming_it(kwargs: dict[str, Any], field: str) -> None:
    args = {"source_id": "s", "event_type": "t", "event_id": "e", "payload": {}, "observed_at": AT}
    with pytest.raises(DefinitionError) as caught:
        event_record(**{**args, **kwargs})
    assert caught.value.field == field


def test_publisher_construction_does_no_network_io() -> None:
    # Nothing listens on port 1: a client created here would only fail later, on first use.
    publisher = EventPublisher("127.0.0.1:1")
    assert publisher.topic == "vigil.events"
    publisher.flush()  # nothing queued, no client: returns at once
