"""The inbox: offset and waiting messages survive a restart, written whole, 0600; a file that
is not ours is set aside."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from pipeline.control.chat.inbox import MAX_FILE, Inbox
from pipeline.control.chat.updates import Message

pytestmark = pytest.mark.unit


def _message(update_id: int, text: str = "hi") -> Message:
    return Message(update_id, "me", update_id * 10, 1_700_000_000, text)


def test_taken_messages_and_the_offset_survive_a_restart_until_done(tmp_path: Path) -> None:
    path = tmp_path / "chats" / "bot.json"
    inbox = Inbox.load(path)
    assert (inbox.offset, inbox.pending()) == (0, [])
    inbox.take(12, [_message(10), _message(11, "ünïcode ✓")])
    inbox.take(12, [_message(11)])  # taken twice: kept once
    again = Inbox.load(path)
    assert again.offset == 12
    assert again.pending() == [_message(10), _message(11, "ünïcode ✓")]
    again.done(_message(10))
    assert Inbox.load(path).pending() == [_message(11, "ünïcode ✓")]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["bot.json"]  # no temporary left


def test_the_offset_never_goes_back(tmp_path: Path) -> None:
    inbox = Inbox.load(tmp_path / "bot.json")
    inbox.take(20, [])
    inbox.take(5, [])
    assert Inbox.load(tmp_path / "bot.json").offset == 20


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b'{"version": 2, "offset": 1, "pending": []}',
        b'{"version": 1, "offset": -1, "pending": []}',
        b'{"version": 1, "offset": 1, "pending": [{"update_id": "x"}]}',
        b"[" * 100_000,
        b" " * (MAX_FILE + 1),
    ],
)
def test_a_file_that_is_not_ours_is_set_aside_and_the_inbox_starts_empty(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "bot.json"
    path.write_bytes(content)
    inbox = Inbox.load(path)
    assert (inbox.offset, inbox.pending()) == (0, [])
    assert path.with_suffix(".bad").exists() and not path.exists()


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    inbox = Inbox(blocker / "bot.json", 3, [_message(2)])
    with pytest.raises(OSError):
        inbox.take(9, [_message(8)])
    with pytest.raises(OSError):
        inbox.done(_message(2))
    assert (inbox.offset, inbox.pending()) == (3, [_message(2)])
