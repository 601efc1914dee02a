"""What one bot's ingress must not lose: its ``getUpdates`` offset and the messages taken but not
yet answered, in one file of the daemon's state directory, written atomically.

Owns :class:`Inbox`: a poll's offset and accepted messages are written before the next poll confirms
them, a turn's end removes its message, so a restart neither loses nor repeats an answered message.
The file is 0600 in a 0700 directory; an unreadable one is set aside with a warning. Left out: what
is accepted (``updates``) and how many may wait (``ingress``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Final

from pipeline.control.chat.updates import MAX_TEXT, Message

__all__ = ["MAX_FILE", "Inbox"]

log = logging.getLogger(__name__)

MAX_FILE: Final = 4 << 20
_VERSION: Final = 1


class Inbox:
    """One bot's offset and waiting messages, mirrored to ``path``. Thread-safe."""

    def __init__(self, path: Path, offset: int = 0, pending: list[Message] | None = None) -> None:
        self.path = path
        self._offset = offset
        self._pending = list(pending or [])
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: Path) -> Inbox:
        """The inbox saved at ``path``; an empty one when there is none or it cannot be read."""
        try:
            with path.open("rb") as file:
                raw = file.read(MAX_FILE + 1)
        except FileNotFoundError:
            return cls(path)
        except OSError as exc:
            log.warning("chat inbox %s unreadable (%s): starting empty", path, exc.strerror)
            return cls(path)
        found = _parse(raw) if len(raw) <= MAX_FILE else None
        if found is None:
            log.warning("chat inbox %s is not one of ours: set aside, starting empty", path)
            with contextlib.suppress(OSError):
                path.replace(path.with_suffix(".bad"))
            return cls(path)
        return cls(path, *found)

    @property
    def offset(self) -> int:
        with self._lock:
            return self._offset

    def pending(self) -> list[Message]:
        with self._lock:
            return list(self._pending)

    def take(self, offset: int, accepted: list[Message]) -> None:
        """Record a poll: the next offset and the messages it accepted (then saved)."""
        with self._lock:
            known = {m.update_id for m in self._pending}
            pending = self._pending + [m for m in accepted if m.update_id not in known]
            self._save(max(self._offset, offset), pending)

    def done(self, message: Message) -> None:
        """A turn ended (answered, or failed and said so): its message is no longer kept."""
        with self._lock:
            pending = [m for m in self._pending if m.update_id != message.update_id]
            self._save(self._offset, pending)

    def _save(self, offset: int, pending: list[Message]) -> None:
        """Write, then hold: a write that fails (:class:`OSError`) changes nothing."""
        data = {
            "version": _VERSION,
            "offset": offset,
            "pending": [
                {
                    "update_id": m.update_id,
                    "chat": m.chat,
                    "message_id": m.message_id,
                    "date": m.date,
                    "text": m.text,
                }
                for m in pending
            ],
        }
        _write_atomically(self.path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
        self._offset, self._pending = offset, pending


def _parse(raw: bytes) -> tuple[int, list[Message]] | None:
    try:
        data: Any = json.loads(raw)
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            return None
        offset = data["offset"]
        pending = [_message(item) for item in data["pending"]]
    except (ValueError, RecursionError, KeyError, TypeError):
        return None
    if type(offset) is not int or offset < 0 or any(m is None for m in pending):
        return None
    return offset, [m for m in pending if m is not None]


def _message(item: Any) -> Message | None:
    fields = ("update_id", "message_id", "date")
    if not isinstance(item, dict) or any(type(item.get(f)) is not int for f in fields):
        return None
    chat, text = item.get("chat"), item.get("text")
    if not isinstance(chat, str) or not isinstance(text, str) or len(text) > MAX_TEXT:
        return None
    return Message(item["update_id"], chat, item["message_id"], item["date"], text)


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all: a fresh 0600 file, fsynced, renamed over."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
