"""The ingress over a scripted update stream: one turn at a time per chat, in order; a full
queue refused politely; everything else ignored and counted; taken messages kept until done."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from pipeline.control.chat.inbox import Inbox
from pipeline.control.chat.ingress import BUSY, TOO_LONG, Bot, ChatIngress
from pipeline.control.chat.updates import MAX_TEXT, Message
from pipeline.control.verbs import VerbResponse
from pipeline.rules.errors import VigilError
from pipeline.rules.outcomes import ErrorCode

pytestmark = pytest.mark.unit

ME, OPS = 4242, 4343


def _wait(condition: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Stream:
    """Scripted answers to getUpdates; every offset asked is kept."""

    def __init__(self) -> None:
        self.answers: list[list[Any] | ErrorCode] = []
        self.offsets: list[int] = []
        self._lock = threading.Lock()

    def push(self, *updates: Any) -> None:
        with self._lock:
            self.answers.append(list(updates))

    def updates(self, offset: int) -> list[Any] | ErrorCode:
        with self._lock:
            self.offsets.append(offset)
            answer = self.answers.pop(0) if self.answers else []
        if answer == []:
            time.sleep(0.01)
        return answer

    def close(self) -> None:
        pass


class Chat:
    """The dispatch core's reply and say, recorded; a turn may be held until released."""

    def __init__(self) -> None:
        self.turns: list[tuple[str, str, str]] = []
        self.said: list[tuple[str, str]] = []
        self.release = threading.Event()
        self.release.set()
        self.running = 0
        self.most = 0
        self.fail: Exception | None = None
        self._lock = threading.Lock()

    def reply(self, text: str, chat: str, turn_id: str) -> VerbResponse:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        self.release.wait(10)
        with self._lock:
            self.running -= 1
            self.turns.append((chat, text, turn_id))
        if self.fail is not None:
            raise self.fail
        return VerbResponse.success(chat=chat)

    def say(self, text: str, chat: str) -> VerbResponse:
        self.said.append((chat, text))
        return VerbResponse.success(chat=chat)


def _update(
    update_id: int, text: str = "hi", chat: int = ME, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    message = {
        "message_id": update_id,
        "from": {"id": 1, "is_bot": False},
        "chat": {"id": chat},
        "date": 1,
        "text": text,
        **(extra or {}),
    }
    return {"update_id": update_id, "message": message}


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[Stream, Chat, Inbox, threading.Event]]:
    stop = threading.Event()
    yield Stream(), Chat(), Inbox.load(tmp_path / "bot.json"), stop
    stop.set()


def _start(parts: tuple[Stream, Chat, Inbox, threading.Event], queue: int = 4) -> ChatIngress:
    stream, chat, inbox, stop = parts
    bot = Bot(stream, {str(ME): "me", str(OPS): "ops"}, {"me": queue, "ops": queue}, inbox)
    ready = threading.Event()
    ready.set()
    ingress = ChatIngress([bot], chat, ready, stop)
    ingress.start()
    return ingress


def _count(chat: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "vigil_chat_updates_total", {"chat": chat, "outcome": outcome}
    )
    return value or 0.0


def test_messages_are_turns_of_their_chat_one_at_a_time_in_order(parts: Any) -> None:
    stream, chat, inbox, _ = parts
    accepted = _count("me", "accepted")
    stream.push(_update(1, "one"), _update(2, "two"), _update(3, "elsewhere", chat=OPS))
    stream.push(_update(4, "three"))
    _start(parts)
    _wait(lambda: len(chat.turns) == 4, "four turns")
    assert [t[1] for t in chat.turns if t[0] == "me"] == ["one", "two", "three"]
    assert chat.most <= 2  # one per chat: me and ops may overlap, never two of one chat
    assert _count("me", "accepted") - accepted == 3
    _wait(lambda: inbox.pending() == [] and inbox.offset == 5, "the inbox to empty")
    assert stream.offsets[0] == 0 and 5 in stream.offsets


def test_a_full_queue_is_refused_politely_and_the_rest_waits_its_turn(parts: Any) -> None:
    stream, chat, inbox, _ = parts
    chat.release.clear()  # the first turn holds
    busy = _count("me", "busy")
    stream.push(_update(1, "a"), _update(2, "b"), _update(3, "c"))
    _start(parts, queue=1)
    _wait(lambda: chat.said, "the refusal")
    assert chat.said == [("me", BUSY)]
    assert [m.text for m in inbox.pending()] == ["a", "b"]  # kept until answered
    chat.release.set()
    _wait(lambda: len(chat.turns) == 2, "two turns")
    assert [t[1] for t in chat.turns] == ["a", "b"]
    assert _count("me", "busy") - busy == 1


def test_what_is_not_a_persons_text_of_ours_is_ignored_counted_and_passed(parts: Any) -> None:
    stream, chat, inbox, _ = parts
    before = {o: _count("-", o) for o in ("other_chat", "malformed")}
    bot_before = _count("me", "bot")
    long_before = _count("me", "too_long")
    stream.push(
        _update(1, chat=999),
        _update(2, extra={"from": {"id": 2, "is_bot": True}}),
        {"update_id": 3, "edited_message": _update(3)["message"]},
        _update(4, "x" * (MAX_TEXT + 1)),
        {"no": "id"},
        _update(5, "real"),
    )
    _start(parts)
    _wait(lambda: chat.turns, "the one turn")
    assert [t[1] for t in chat.turns] == ["real"]
    assert chat.said == [("me", TOO_LONG)]
    assert _count("-", "other_chat") - before["other_chat"] == 1
    assert _count("-", "malformed") - before["malformed"] == 1
    assert _count("me", "bot") - bot_before == 1
    assert _count("me", "too_long") - long_before == 1
    _wait(lambda: inbox.offset == 6, "the offset past every update")


def test_taken_messages_resume_first_at_start_and_a_stop_mid_turn_keeps_one(
    parts: Any, tmp_path: Path
) -> None:
    _, chat, inbox, stop = parts
    inbox.take(8, [Message(7, "me", 70, 1, "left over")])
    chat.release.clear()
    _start(parts)
    _wait(lambda: chat.running, "the resumed turn")
    stop.set()
    chat.release.set()
    _wait(lambda: chat.turns, "the turn to end")
    assert chat.turns[0][1] == "left over"
    assert [m.text for m in Inbox.load(tmp_path / "bot.json").pending()] == ["left over"]


def test_a_failed_turn_is_said_to_the_chat_and_not_kept(parts: Any) -> None:
    stream, chat, inbox, _ = parts
    chat.fail = VigilError("the agent did not answer within 1s")
    stream.push(_update(1, "hello"))
    _start(parts)
    _wait(lambda: chat.said, "the apology")
    assert chat.said == [
        ("me", "Sorry, I could not answer that: the agent did not answer within 1s")
    ]
    _wait(lambda: inbox.pending() == [] and inbox.offset == 2, "the message done")


def test_a_failing_poll_backs_off_and_then_reads_again(parts: Any) -> None:
    stream, chat, _, _ = parts
    stream.answers += [ErrorCode.CONNECT, ErrorCode.HTTP_5XX]
    stream.push(_update(1, "after"))
    started = time.monotonic()
    _start(parts)
    _wait(lambda: chat.turns, "the turn after the failures")
    assert time.monotonic() - started >= 1.0 + 2.0 - 0.5  # 1 s, then 2 s
