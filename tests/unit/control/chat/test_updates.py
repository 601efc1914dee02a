"""Reading getUpdates: a person's text in a configured chat is accepted; everything else is
ignored with its reason; the readers are total over any input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.control.chat.updates import (
    MAX_TEXT,
    UpdateOutcome,
    classify,
    read_updates,
)

pytestmark = pytest.mark.unit

CHATS = {"4242": "me", "@news": "channel"}


def _message(text: Any = "hello", chat: Any = 4242, is_bot: bool = False) -> dict[str, Any]:
    return {
        "update_id": 10,
        "message": {
            "message_id": 3,
            "from": {"id": 7, "is_bot": is_bot},
            "chat": {"id": chat, "type": "private"},
            "date": 1_700_000_000,
            "text": text,
        },
    }


def test_a_persons_text_in_a_configured_chat_is_accepted_with_a_stable_turn_id() -> None:
    found = classify(_message(), CHATS)
    assert found.outcome is UpdateOutcome.ACCEPTED
    assert found.message is not None
    assert (found.message.chat, found.message.text, found.update_id) == ("me", "hello", 10)
    assert found.message.turn_id == classify(_message(), CHATS).message.turn_id  # type: ignore[union-attr]
    assert found.message.turn_id.startswith("turn:") and len(found.message.turn_id) <= 128


def test_a_chat_named_by_username_is_matched() -> None:
    update = _message(chat=-100)
    update["message"]["chat"]["username"] = "news"
    assert classify(update, CHATS).chat == "channel"


@pytest.mark.parametrize(
    ("update", "outcome"),
    [
        (_message(chat=999), UpdateOutcome.OTHER_CHAT),
        (_message(is_bot=True), UpdateOutcome.BOT),
        ({"update_id": 1, "edited_message": _message()["message"]}, UpdateOutcome.EDIT),
        ({"update_id": 1, "callback_query": {}}, UpdateOutcome.NOT_TEXT),
        (_message(text=None), UpdateOutcome.NOT_TEXT),
        (_message(text="   "), UpdateOutcome.NOT_TEXT),
        (_message(text="x" * (MAX_TEXT + 1)), UpdateOutcome.TOO_LONG),
        (_message(text="\ud800"), UpdateOutcome.MALFORMED),
        ({"update_id": "1"}, UpdateOutcome.MALFORMED),
        ([], UpdateOutcome.MALFORMED),
    ],
)
def test_what_is_not_a_persons_text_of_ours_is_ignored_with_its_reason(
    update: object, outcome: UpdateOutcome
) -> None:
    found = classify(update, CHATS)
    assert (found.outcome, found.message) == (outcome, None)


def test_a_message_without_a_sender_is_no_person() -> None:
    update = _message()
    del update["message"]["from"]
    assert classify(update, CHATS).outcome is UpdateOutcome.BOT


def test_read_updates_takes_only_a_successful_bot_api_answer() -> None:
    assert read_updates(b'{"ok": true, "result": [{"update_id": 1}]}') == [{"update_id": 1}]
    for body in (b'{"ok": false}', b'{"ok": true, "result": {}}', b"[", b"{}", b"\xff"):
        assert read_updates(body) is None
    assert read_updates(b"[" * 100_000) is None  # too deep: refused, not a crash


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
_UPDATE = st.fixed_dictionaries(
    {"update_id": st.integers() | st.text(max_size=3)},
    optional={
        "message": st.fixed_dictionaries(
            {},
            optional={
                "chat": st.fixed_dictionaries({}, optional={"id": st.integers() | _JSON}),
                "from": st.fixed_dictionaries({}, optional={"is_bot": st.booleans() | _JSON}),
                "text": st.text(max_size=50) | _JSON,
                "message_id": st.integers() | _JSON,
                "date": st.integers() | _JSON,
            },
        )
        | _JSON,
        "edited_message": _JSON,
    },
)


@settings(max_examples=200, deadline=None)
@given(update=_UPDATE | _JSON)
def test_classify_is_total_and_accepts_only_a_bounded_text_of_ours(update: object) -> None:
    found = classify(update, {"4242": "me"})
    if found.outcome is UpdateOutcome.ACCEPTED:
        assert found.message is not None and found.chat == "me"
        assert 0 < len(found.message.text) <= MAX_TEXT
    else:
        assert found.message is None


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=200) | _JSON.map(lambda v: json.dumps(v).encode()))
def test_read_updates_is_total(body: bytes) -> None:
    found = read_updates(body)
    assert found is None or isinstance(found, list)
