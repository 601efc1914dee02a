"""``POST /v1/events`` under hostile bodies (DESIGN.md §10 "Hostile input"): a hypothesis property
over generated and mutated batches, sent through the real app (``TestClient``, no server) with
an events port that checks and encodes each accepted item exactly as the publisher SDK does
before it would produce it. Every body is answered 200 with one verdict per item, in order —
``accepted``, or ``rejected`` with a code and a message — or refused as a whole with a named
error code; never a 500, never a traceback.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Final

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import parse_config
from pipeline.control.http.api import ApiServices, create_app
from pipeline.control.http.auth import ApiCode, TokenDirectory
from pipeline.control.http.events import MAX_BATCH
from pipeline.kafka.serde import default_codec
from pipeline.records.event import EVENT, EventLine, event_line, line_record
from pipeline.rules.errors import DefinitionError
from tests.unit.control.http.test_auth import MemoryProcessor, NoLedger, refuse_schedules
from tests.unit.rules.commands.test_hostile_commands import HOSTILE, nested

pytestmark = pytest.mark.unit

SOURCE: Final = "ci.pipeline"
TOKEN: Final = "publisher-secret"
HEADERS: Final = {
    "Authorization": f"Bearer {TOKEN}",
    "Vigil-Protocol-Version": "1",
    "Content-Type": "application/json",
}
EVENT_ITEM: Final[dict[str, Any]] = {
    "source_id": SOURCE,
    "event_type": "build.finished",
    "event_id": "e-1",
    "observed_at": "2026-11-29T12:00:00Z",
    "cursor": "c-1",
    "envelope_id": None,
    "payload": {"status": "failed", "commit": {"sha": "abc"}, "n": [1, 2.5, None, True]},
}
ITEM_HOSTILITY: Final[dict[str, list[Any]]] = {
    "source_id": ["other.source", "", "a" * 10_000, 7, None],
    "event_type": ["", "a" * 10_000, "build finished", None],
    "event_id": ["", "e" * 1_000, 12, None, "e-\ud800"],
    "cursor": ["", "c" * 2_000, "c-\ud800", 5],
    "observed_at": ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59-01:00", "yesterday", 0],
    "payload": [
        nested(70),
        nested(63),
        {"n": 2**53},
        {"n": 10**30},
        [1, 2],
        "text",
        {"s": "x" * 200_000},
        {"\ud800": 1},
        {"s": "\udfff"},
    ],
}


class CheckingEvents:
    """The API's events port minus the broker: each event checked and encoded as
    :class:`~producers.publish.EventPublisher` does before producing it, a refusal
    (``DefinitionError``) answered as that item's problem, as the SDK adapter answers it."""

    def __init__(self) -> None:
        self.encoded = 0
        self._codec = default_codec()

    def publish(
        self, events: Sequence[tuple[EventLine, datetime]], tenant_id: str
    ) -> list[str | None]:
        verdicts: list[str | None] = []
        for line, observed_at in events:
            try:
                record = line_record(line, observed_at, tenant_id)
            except DefinitionError as exc:
                verdicts.append(str(exc))
                continue
            self._codec.encode(EVENT, record)
            self.encoded += 1
            verdicts.append(None)
        return verdicts


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    principal = {
        "token_sha256": digest,
        "role": "publisher",
        "tenant_id": "acme",
        "user_id": "ci",
        "sources": [SOURCE],
    }
    config = parse_config({"principals": {"ci": principal}})
    services = ApiServices(
        tokens=TokenDirectory.from_config(config.principals),
        commands=MemoryProcessor(),
        ledger=NoLedger(),
        schedules=refuse_schedules,
        events=CheckingEvents(),
        publishers={"ci": frozenset({SOURCE})},
    )
    with TestClient(create_app(services), raise_server_exceptions=False) as running:
        yield running


@st.composite
def items(draw: st.DrawFn) -> Any:
    """One item: the honest event, up to three of its fields made hostile, a key dropped or
    added, or something that is not an event at all."""
    item: Any = copy.deepcopy(EVENT_ITEM)
    item["event_id"] = f"e-{draw(st.integers(0, 99))}"
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        name = draw(st.sampled_from(sorted(EVENT_ITEM)))
        how = draw(st.sampled_from(["field", "field", "any", "drop", "add", "text"]))
        if how == "field" and name in ITEM_HOSTILITY:
            item[name] = copy.deepcopy(draw(st.sampled_from(ITEM_HOSTILITY[name])))
        elif how == "any":
            item[name] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        elif how == "drop":
            item.pop(name, None)
        elif how == "add":
            item[draw(st.sampled_from(["extra", "tenant_id", "__proto__"]))] = 1
        else:
            item[name] = draw(st.text(max_size=30))
    if draw(st.integers(0, 15)) == 0:
        return copy.deepcopy(draw(st.sampled_from(HOSTILE)))
    return item


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A request body: a batch of items, a batch of the wrong shape or size, or bytes."""
    batch: Any = {"events": draw(st.lists(items(), min_size=1, max_size=8))}
    how = draw(st.sampled_from(["batch"] * 10 + ["shape", "size", "cut", "deep", "junk"]))
    if how == "shape":
        batch = draw(
            st.sampled_from(
                [[], {}, {"events": []}, {"events": {}}, {"events": batch["events"], "x": 1}, None]
            )
        )
    elif how == "size":
        batch = {"events": [EVENT_ITEM] * (MAX_BATCH + 1)}
    text = json.dumps(batch, allow_nan=True)
    if how == "cut":
        return text[: draw(st.integers(0, len(text)))].encode()
    if how == "deep":
        return ("[" * 100_000 + "]" * 100_000).encode()
    if how == "junk":
        return draw(st.binary(max_size=60))
    return text.encode()


def expected_verdict(item: Any) -> str:
    """``accepted`` when the item is an event of the publisher's source whose values hold,
    else ``rejected``: the same checks, asked directly."""
    try:
        line, observed_at = event_line(item)
        if line.source_id != SOURCE:
            return "rejected"
        line_record(line, observed_at)
    except DefinitionError:
        return "rejected"
    return "accepted"


@pytest.mark.slow
@settings(
    max_examples=400,
    deadline=None,  # no absolute timings in tests (bounds are in the parser: sizes, depth)
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=bodies())
def test_every_event_body_is_answered_per_item_or_refused_with_a_named_code(
    client: TestClient, body: bytes
) -> None:
    response = client.post("/v1/events", content=body, headers=HEADERS)
    assert response.status_code < 500, (response.status_code, response.text[:500])
    answer = response.json()
    if response.status_code != 200:
        error = answer["error"]
        assert error["code"] in {code.value for code in ApiCode} and error["message"]
        return
    sent = json.loads(body)["events"]
    results = answer["results"]
    assert [r["index"] for r in results] == list(range(len(sent)))
    assert answer["accepted"] + answer["rejected"] == len(sent)
    for item, result in zip(sent, results, strict=True):
        assert result["status"] == expected_verdict(item), (item, result)
        if result["status"] == "rejected":
            assert result["code"] in {"invalid", "denied"} and result["message"]


def test_the_generator_reaches_accepted_items_rejected_items_and_whole_refusals(
    client: TestClient,
) -> None:
    """The property above is not vacuous: an honest batch is accepted, a hostile item in it
    rejected alone, and a body of the wrong shape refused as a whole."""
    hostile = {**EVENT_ITEM, "payload": nested(70)}
    batch = json.dumps({"events": [EVENT_ITEM, hostile, {**EVENT_ITEM, "source_id": "x.y"}]})
    answer = client.post("/v1/events", content=batch, headers=HEADERS).json()
    assert [(r["status"], r["code"]) for r in answer["results"]] == [
        ("accepted", None),
        ("rejected", "invalid"),
        ("rejected", "denied"),
    ]
    surrogates = [{**EVENT_ITEM, "cursor": "c-\ud800"}, {**EVENT_ITEM, "payload": {"\ud800": 1}}]
    answer = client.post(
        "/v1/events", content=json.dumps({"events": surrogates}), headers=HEADERS
    ).json()  # a lone surrogate once made the encoder raise: a 500
    assert [(r["status"], r["message"].split(":")[0]) for r in answer["results"]] == [
        ("rejected", "cursor"),
        ("rejected", "payload"),
    ]
    deep = client.post("/v1/events", content=b"[" * 100_000, headers=HEADERS)
    assert deep.status_code == 400 and deep.json()["error"]["code"] == "invalid"
