"""Telegram ``getUpdates`` answers, read: which updates are messages a conversation takes.

Owns :class:`UpdateOutcome` (accepted, or why ignored), :class:`Message` and the pure, total readers
:func:`read_updates` (a body → its updates, or None) and :func:`classify` (one update → a message of
a configured chat, or the reason it is ignored); text longer than :data:`MAX_TEXT` is refused, never
cut. Left out: asking for updates (``telegram``) and what a message becomes (``ingress``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

__all__ = ["MAX_TEXT", "Classified", "Message", "UpdateOutcome", "classify", "read_updates"]

MAX_TEXT: Final = 4096  # Telegram's own bound on one message; a turn's prompt
_EDITS: Final = frozenset({"edited_message", "edited_channel_post", "edited_business_message"})


class UpdateOutcome(StrEnum):
    ACCEPTED = "accepted"
    BUSY = "busy"  # the chat's queue was full: refused politely
    OTHER_CHAT = "other_chat"
    BOT = "bot"  # a bot, or no person (a channel or an anonymous admin)
    EDIT = "edit"
    NOT_TEXT = "not_text"  # a photo, a sticker, a join, any other kind of update
    TOO_LONG = "too_long"
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class Message:
    """A person's text in a configured chat (``chat``: its vigil name)."""

    update_id: int
    chat: str
    message_id: int
    date: int
    text: str

    @property
    def turn_id(self) -> str:
        """The turn's request id: the same for the same message, so its answer is sent once."""
        seen = f"{self.chat}:{self.update_id}:{self.message_id}:{self.date}"
        return "turn:" + hashlib.sha256(seen.encode()).hexdigest()[:40]


@dataclass(frozen=True, slots=True)
class Classified:
    """One update: its id (None when it has none), the outcome, the message when accepted, and
    the configured chat it came from when known."""

    update_id: int | None
    outcome: UpdateOutcome
    message: Message | None = None
    chat: str | None = None


def read_updates(body: bytes) -> list[Any] | None:
    """The ``result`` list of a successful ``getUpdates`` answer; None for anything else."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("ok") is not True:
        return None
    result = data.get("result")
    return result if isinstance(result, list) else None


def _int(value: object) -> int | None:
    return value if type(value) is int and abs(value) < 2**63 else None


def classify(update: object, chats: Mapping[str, str]) -> Classified:
    """What ``update`` is for a bot whose configured chats are ``chats`` (Telegram chat id or
    ``@username`` → vigil chat name)."""
    if not isinstance(update, dict) or (update_id := _int(update.get("update_id"))) is None:
        return Classified(None, UpdateOutcome.MALFORMED)
    if any(kind in update for kind in _EDITS):
        return Classified(update_id, UpdateOutcome.EDIT)
    message = update.get("message")
    if not isinstance(message, dict):
        return Classified(update_id, UpdateOutcome.NOT_TEXT)
    chat = _chat_name(message.get("chat"), chats)
    if chat is None:
        return Classified(update_id, UpdateOutcome.OTHER_CHAT)
    sender = message.get("from")
    if not isinstance(sender, dict) or sender.get("is_bot") is not False:
        return Classified(update_id, UpdateOutcome.BOT, chat=chat)
    text = message.get("text")
    if not isinstance(text, str) or not text.strip():
        return Classified(update_id, UpdateOutcome.NOT_TEXT, chat=chat)
    if len(text) > MAX_TEXT:
        return Classified(update_id, UpdateOutcome.TOO_LONG, chat=chat)
    if not _encodable(text):  # a lone surrogate: no agent could read it
        return Classified(update_id, UpdateOutcome.MALFORMED, chat=chat)
    message_id, date = _int(message.get("message_id")), _int(message.get("date"))
    if message_id is None or date is None:
        return Classified(update_id, UpdateOutcome.MALFORMED, chat=chat)
    found = Message(update_id, chat, message_id, date, text)
    return Classified(update_id, UpdateOutcome.ACCEPTED, found, chat)


def _chat_name(chat: object, chats: Mapping[str, str]) -> str | None:
    if not isinstance(chat, dict):
        return None
    chat_id = _int(chat.get("id"))
    if chat_id is not None and str(chat_id) in chats:
        return chats[str(chat_id)]
    username = chat.get("username")
    if isinstance(username, str) and len(username) <= 64:
        return chats.get("@" + username)
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
