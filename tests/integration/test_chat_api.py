"""The Bot API long poll over real HTTP (the Telegram-shaped receiver): updates from an offset,
which confirms the ones below it; a wrong token or no server is a code, never an exception or the
token in a log."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from pydantic import SecretStr

from pipeline.control.chat.telegram import BotApi
from pipeline.rules.outcomes import ErrorCode
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

TOKEN = "42:chat-api-test"


def test_updates_from_an_offset_confirm_the_ones_below_it() -> None:
    with Receiver(bot_token=TOKEN) as receiver:
        api = BotApi(receiver.url, SecretStr(TOKEN), timedelta(seconds=1))
        first = receiver.message(4242, "one")
        receiver.message(4242, "two")
        found = api.updates(0)
        assert isinstance(found, list)
        assert [u["message"]["text"] for u in found] == ["one", "two"]
        again = api.updates(first + 1)  # "one" is confirmed: gone
        assert isinstance(again, list)
        assert [u["message"]["text"] for u in again] == ["two"]
        assert api.updates(first + 2) == []  # the long poll ends empty after its timeout
        assert receiver.polls == [0, first + 1, first + 2]
        assert receiver.requests == []  # polls are not deliveries
        api.close()


def test_a_wrong_token_and_no_server_are_codes_and_the_token_is_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    with Receiver(bot_token=TOKEN) as receiver:
        wrong = BotApi(receiver.url, SecretStr("42:wrong-secret"), timedelta(seconds=1))
        assert wrong.updates(0) is ErrorCode.HTTP_4XX
        wrong.close()
    closed = BotApi("http://127.0.0.1:9", SecretStr("42:wrong-secret"), timedelta(seconds=1))
    assert closed.updates(0) is ErrorCode.CONNECT
    closed.close()
    assert "wrong-secret" not in caplog.text
