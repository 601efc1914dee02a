"""Chat ingress: one long poll per bot, one turn at a time per chat (DESIGN.md §5).

Owns :class:`ChatIngress` (chats sharing a bot share one poller): a configured chat's message from a
person joins its chat's queue (at most ``queue`` wait, more are refused politely), the rest is
ignored and counted (``vigil_chat_updates``); taken messages are saved (``inbox``) first; each
chat's turns run in order, a failure said to the chat; failed polls back off. Left out: the turn
(the dispatch core's ``reply``), the Bot API (``telegram``), the state directory and token."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from prometheus_client import Counter
from pydantic import SecretStr

from pipeline.config import TelegramChat, VigilConfig
from pipeline.control.chat.inbox import Inbox
from pipeline.control.chat.telegram import BotApi
from pipeline.control.chat.updates import MAX_TEXT, Message, UpdateOutcome, classify
from pipeline.control.verbs import VerbResponse
from pipeline.rules.errors import ConfigError, VigilError
from pipeline.rules.outcomes import ErrorCode

__all__ = [
    "BUSY",
    "TOO_LONG",
    "Bot",
    "ChatIngress",
    "Conversation",
    "UpdateSource",
    "listening_bots",
]

log = logging.getLogger(__name__)

BUSY: Final = "I'm still answering your earlier messages: please send this one again in a moment."
TOO_LONG: Final = f"That message is longer than {MAX_TEXT} characters: please send a shorter one."
_BACKOFF_S: Final = (1.0, 60.0)
_UPDATES: Final = Counter(
    "vigil_chat_updates",
    "Chat updates the daemon read, by chat (- when none of ours) and outcome (accepted, busy, "
    "or why it was ignored).",
    ["chat", "outcome"],
)


class UpdateSource(Protocol):
    """A bot's update stream (:class:`~pipeline.control.chat.telegram.BotApi`)."""

    def updates(self, offset: int) -> list[Any] | ErrorCode: ...

    def close(self) -> None: ...


class Conversation(Protocol):
    """What a turn needs: the dispatch core's ``reply`` and ``say``."""

    def reply(self, text: str, chat: str, turn_id: str) -> VerbResponse: ...

    def say(self, text: str, chat: str) -> VerbResponse: ...


@dataclass(frozen=True, slots=True)
class Bot:
    """One bot's update stream: its API, its chats (Telegram chat id or ``@name`` → vigil
    chat name, each with its queue bound) and the file its inbox is kept in."""

    api: UpdateSource
    chats: Mapping[str, str]
    queues: Mapping[str, int]
    inbox: Inbox


def listening_bots(config: VigilConfig, state: Path, environ: Mapping[str, str]) -> list[Bot]:
    """The bots of the Telegram chats that ``listen``, chats of one bot together; each bot's
    inbox in ``state`` (``<namespace>.<bot digest>.json``). A token variable that is unset is
    a :class:`ConfigError` naming it (or ``listen = false``)."""
    grouped: dict[tuple[str, str], list[tuple[str, TelegramChat]]] = {}
    for name, chat in config.chats.items():
        if not isinstance(chat, TelegramChat) or not chat.listen:
            continue
        token = environ.get(chat.token_env)
        if not token:
            raise ConfigError(
                f"chats.{name}.token_env: environment variable {chat.token_env} is not set or "
                f"empty (the daemon reads the chat; set listen = false in [chats.{name}] if not)"
            )
        grouped.setdefault((chat.api_base, token), []).append((name, chat))
    bots = []
    for (api_base, token), chats in grouped.items():
        digest = hashlib.sha256(f"{api_base}\0{token}".encode()).hexdigest()[:16]
        inbox = Inbox.load(state / f"{config.namespace.name}.{digest}.json")
        api = BotApi(api_base, SecretStr(token), max(chat.poll_timeout for _, chat in chats))
        ids = {chat.chat_id: name for name, chat in chats}
        bots.append(Bot(api, ids, {name: chat.queue for name, chat in chats}, inbox))
    return bots


class _Worker:
    """One chat's turns, one at a time, in the order its messages came."""

    def __init__(self, chat: str, bound: int, run: Callable[[Message], None]) -> None:
        self.chat = chat
        self._bound = bound
        self._run = run
        self._waiting: deque[Message] = deque()
        self._busy = False
        self._ready = threading.Condition()

    def room(self) -> int:
        """How many more messages may join (waiting ones, and one for an idle worker)."""
        with self._ready:
            return self._bound + (0 if self._busy else 1) - len(self._waiting)

    def offer(self, messages: Sequence[Message]) -> None:
        with self._ready:
            self._waiting.extend(messages)
            self._ready.notify()

    def loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._ready:
                if not self._waiting:
                    self._busy = False
                    self._ready.wait(0.5)
                    continue
                message = self._waiting.popleft()
                self._busy = True
            self._run(message)


class ChatIngress:
    """Polls ``bots`` once ``ready`` is set, until ``stop``; turns go to ``conversation``."""

    def __init__(
        self,
        bots: Sequence[Bot],
        conversation: Conversation,
        ready: threading.Event,
        stop: threading.Event,
    ) -> None:
        self._bots = list(bots)
        self._conversation = conversation
        self._ready = ready
        self._stop = stop
        self._workers: dict[str, _Worker] = {}
        self._inboxes: dict[str, Inbox] = {}
        for bot in self._bots:
            for chat in bot.chats.values():
                self._workers[chat] = _Worker(chat, bot.queues[chat], self._turn)
                self._inboxes[chat] = bot.inbox

    def start(self) -> None:
        """Start every worker and poller (daemon threads); taken messages resume first."""
        for bot in self._bots:
            for message in bot.inbox.pending():
                worker = self._workers.get(message.chat)
                if worker is None:  # its chat is no longer configured
                    bot.inbox.done(message)
                else:
                    worker.offer([message])
        for chat, worker in self._workers.items():
            threading.Thread(
                target=worker.loop, args=(self._stop,), name=f"chat-{chat}", daemon=True
            ).start()
        for index, bot in enumerate(self._bots):
            threading.Thread(
                target=self._poll, args=(bot,), name=f"chat-poll-{index}", daemon=True
            ).start()

    def close(self) -> None:
        for bot in self._bots:
            bot.api.close()

    # -- polls -----------------------------------------------------------------------------

    def _poll(self, bot: Bot) -> None:
        while not self._ready.wait(0.2):
            if self._stop.is_set():
                return
        wait = _BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                found = bot.api.updates(bot.inbox.offset)
            except Exception:  # one poll's failure, never the poller's (a client closed at stop)
                log.debug("chat poll failed", exc_info=True)
                found = ErrorCode.INTERNAL
            if isinstance(found, list):
                try:
                    self._take(bot, found)
                except OSError as exc:  # the inbox cannot be saved: confirm nothing
                    log.warning("cannot save the chat inbox %s: %s", bot.inbox.path, exc.strerror)
                    found = ErrorCode.INTERNAL
            if isinstance(found, list):
                if wait > _BACKOFF_S[0]:
                    log.info("chat updates are read again")
                wait = _BACKOFF_S[0]
                continue
            if wait == _BACKOFF_S[0]:
                log.warning("cannot read chat updates (%s): retrying with backoff", found.value)
            self._stop.wait(wait)
            wait = min(wait * 2, _BACKOFF_S[1])

    def _take(self, bot: Bot, updates: Sequence[object]) -> None:
        """Classify, save what is taken with the next offset, then queue it and say the rest."""
        offset = bot.inbox.offset
        room = {chat: self._workers[chat].room() for chat in bot.chats.values()}
        taken: list[Message] = []
        said: list[tuple[str, str]] = []
        for update in updates:
            verdict = classify(update, bot.chats)
            if verdict.update_id is not None:
                offset = max(offset, verdict.update_id + 1)
            outcome, chat = verdict.outcome, verdict.chat
            if verdict.message is not None and chat is not None:
                if room[chat] > 0:
                    room[chat] -= 1
                    taken.append(verdict.message)
                else:
                    outcome = UpdateOutcome.BUSY
                    said.append((chat, BUSY))
            elif outcome is UpdateOutcome.TOO_LONG and chat is not None:
                said.append((chat, TOO_LONG))
            _UPDATES.labels(chat or "-", outcome.value).inc()
        if offset != bot.inbox.offset or taken:
            bot.inbox.take(offset, taken)
        for chat, worker in self._workers.items():
            mine = [m for m in taken if m.chat == chat]
            if mine:
                worker.offer(mine)
        for chat, text in said:
            self._say(text, chat)

    # -- turns -----------------------------------------------------------------------------

    def _turn(self, message: Message) -> None:
        """Ask the agent in the chat's conversation; a failure is said to the chat. The message
        is kept (and run again at the next start) only when the daemon stops mid-turn."""
        try:
            response = self._conversation.reply(message.text, message.chat, message.turn_id)
            failure = None if response.error is None else response.error.message
        except VigilError as exc:
            failure = str(exc)
        except Exception:
            log.exception("chat turn failed")
            failure = "internal error (see the daemon log)"
        if self._stop.is_set():
            return
        if failure is not None:
            log.warning("chat %s: turn failed: %s", message.chat, failure)
            self._say(f"Sorry, I could not answer that: {failure}", message.chat)
        try:
            self._inboxes[message.chat].done(message)
        except OSError as exc:  # kept: the next start runs the turn again, answered once
            log.warning("cannot save the chat inbox: %s", exc.strerror)

    def _say(self, text: str, chat: str) -> None:
        try:
            response = self._conversation.say(text[:MAX_TEXT], chat)
        except Exception:
            log.exception("cannot say to chat %s", chat)
            return
        if response.error is not None:
            log.warning("cannot say to chat %s: %s", chat, response.error.message)
