"""Messages: what a person reads when a watcher fires (DESIGN.md §3 "Messages").

Owns the ``delivery.message`` grammar (literal text, ``{field}``, ``{{``/``}}``; nothing else), its
total, bounded parser :func:`parse_template`, :meth:`MessageTemplate.check` (fields name kept
evidence), rendering over retained leaves (:func:`render`, :func:`default_message`) and each
channel's escaping (:func:`for_channel`); all pure. Left out: which entry carries a message and
where it goes (``outbox``, adapters)."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from pipeline.rules.bounds import MAX_MESSAGE, MAX_TEMPLATE, MAX_TEMPLATE_FIELDS
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.native import NATIVE
from pipeline.rules.paths import MISSING, Path, format_path, parse_path, resolve
from pipeline.rules.privacy import keep_leaves

__all__ = [
    "ABSENT",
    "FIELDS",
    "MAX_VALUE",
    "Channel",
    "MessageFields",
    "MessageTemplate",
    "Slot",
    "default_message",
    "for_channel",
    "parse_template",
    "render",
]

FIELD: Final = "delivery.message"
FIELDS: Final = (
    "watcher_id",
    "purpose",
    "outcome",
    "event_type",
    "event_id",
    "observed_at",
    "due_at",
)
"""The named fields; ``{payload.<path>}`` names a retained leaf."""
MAX_VALUE: Final = 256
"""Characters of one rendered value; longer is cut."""
ABSENT: Final = "(absent)"
"""What a field renders as when its evidence does not hold it."""

_EVENT_FIELDS: Final = frozenset({"event_type", "event_id"})
_DEFAULT_NAMED: Final = ("watcher_id", "purpose", "outcome", "event_type", "event_id")
_PAYLOAD: Final = "payload."
_TOKEN: Final = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]|[^{}]+")
# Line breaks and tabs: a space in a value, so a value never forges a line of its own.
_BREAKS: Final = re.compile(r"\r\n|[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# C0 controls but tab and line feed, DEL, C1, bidirectional overrides and isolates (text that
# reads other than it is), lone surrogates (not Unicode): refused in a template, replaced in text.
_UNSAFE: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Slot:
    """One ``{field}``: a named field, or ``payload`` and the leaf's ``path``."""

    name: str
    path: Path = ()

    def __str__(self) -> str:
        return "{" + (_PAYLOAD + format_path(self.path) if self.path else self.name) + "}"


@dataclass(frozen=True, slots=True)
class MessageTemplate:
    """A parsed template: its literal text and slots, in order."""

    parts: tuple[str | Slot, ...]

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(part for part in self.parts if isinstance(part, Slot))

    def check(self, retained: Collection[Path], *, events: bool) -> None:
        """Refuse a slot the evidence will not hold: a payload leaf ``retained`` (the privacy
        allowlist) does not keep, or an event's field when the source has no events."""
        for slot in self.slots:
            if slot.path and slot.path not in retained:
                leaf = format_path(slot.path)
                raise DefinitionError(
                    f"{slot} is not a leaf privacy.retain_paths keeps: retain {leaf} or leave "
                    "it out",
                    FIELD,
                )
            if slot.name in _EVENT_FIELDS and not events:
                raise DefinitionError(f"{slot} is an event's field: this source has none", FIELD)


class MessageFields:
    """What a message may show: the watcher's own words and its evidence as the receipt keeps
    it. The payload is filtered here, so nothing outside ``retained`` can be rendered."""

    __slots__ = ("leaves", "named", "retained")

    def __init__(
        self,
        *,
        watcher_id: str,
        purpose: str,
        outcome: str,
        observed_at: datetime,
        due_at: datetime,
        payload: Mapping[str, Any],
        retained: tuple[Path, ...],
        event_type: str | None = None,
        event_id: str | None = None,
        kept: dict[str, Any] | None = None,
    ) -> None:
        """``kept``: ``keep_leaves(payload, retained)`` when the caller has it (the evaluator's
        receipt keeps the same leaves); a slot still renders only a ``retained`` path."""
        self.retained = retained
        self.leaves = keep_leaves(payload, retained) if kept is None else kept
        self.named: dict[str, str | datetime | None] = {
            "watcher_id": watcher_id,
            "purpose": purpose,
            "outcome": outcome,
            "event_type": event_type,
            "event_id": event_id,
            "observed_at": observed_at,
            "due_at": due_at,
        }

    def value(self, slot: Slot) -> str:
        """The text of ``slot``: :data:`ABSENT` when the evidence does not hold it (a payload
        slot: no scalar leaf at exactly a retained path)."""
        return self.leaf(slot.path) if slot.path else self.text(slot.name)

    def leaf(self, path: Path) -> str:
        """The text of the scalar leaf at ``path`` if ``retained`` keeps it, else ABSENT."""
        found = resolve(self.leaves, path) if path in self.retained else MISSING
        return ABSENT if found is MISSING or isinstance(found, dict) else _text(found)

    def text(self, name: str) -> str:
        """The text of the named field ``name`` (instants as RFC 3339 UTC, seconds)."""
        named = self.named.get(name)
        if named is None:
            return ABSENT
        return rfc3339_seconds(named) if isinstance(named, datetime) else _text(named)


class Channel(StrEnum):
    """Where a message is read. Chats send no parse mode, so Telegram shows text as it is."""

    CHAT = "chat"  # Telegram-shaped chats and the console: plain text
    IN_APP = "in_app"  # the ledger, plain text (a page that shows it escapes its own markup)
    WEBHOOK = "webhook"  # plain text in the JSON body
    LOG = "log"  # one line: backslash, line feed and tab written \\, \n and \t


def parse_template(text: object) -> MessageTemplate:
    """``text`` as a template, or a refusal naming ``delivery.message`` and what is wrong."""
    if not isinstance(text, str):
        raise DefinitionError(f"a message template is a string, not {type(text).__name__}", FIELD)
    if not 0 < len(text) <= MAX_TEMPLATE:
        raise DefinitionError(f"a message template is 1..{MAX_TEMPLATE} characters", FIELD)
    unsafe = _UNSAFE.search(text)
    if unsafe is not None:
        code = f"U+{ord(unsafe.group()):04X}"
        raise DefinitionError(f"control character {code} at {unsafe.start()}", FIELD)
    parts: list[str | Slot] = []
    for match in _TOKEN.finditer(text):
        token, inner = match.group(), match.group(1)
        if inner is not None:
            parts.append(_slot(inner, match.start()))
        elif token in ("{", "}"):
            raise DefinitionError(
                f"a lone {token} at {match.start()}: write {token * 2} for a brace", FIELD
            )
        elif parts and isinstance(parts[-1], str):
            parts[-1] += token[0] if token in ("{{", "}}") else token
        else:
            parts.append(token[0] if token in ("{{", "}}") else token)
    template = MessageTemplate(tuple(parts))
    if len(template.slots) > MAX_TEMPLATE_FIELDS:
        raise DefinitionError(f"a message names at most {MAX_TEMPLATE_FIELDS} fields", FIELD)
    return template


def _slot(inner: str, at: int) -> Slot:
    if inner in FIELDS:
        return Slot(inner)
    if inner.startswith(_PAYLOAD):
        try:
            return Slot("payload", parse_path(inner[len(_PAYLOAD) :], FIELD))
        except DefinitionError as exc:
            raise DefinitionError(f"{{{inner[:80]}}} at {at}: {exc.message}", FIELD) from None
    known = ", ".join("{" + name + "}" for name in FIELDS)
    raise DefinitionError(
        f"unknown field {{{inner[:80]}}} at {at}: the fields are {known} and "
        "{payload.<a retained path>}",
        FIELD,
    )


def render(template: MessageTemplate, fields: MessageFields) -> str:
    """``template`` filled in from ``fields``, at most :data:`MAX_MESSAGE` characters."""
    text = "".join(part if isinstance(part, str) else fields.value(part) for part in template.parts)
    return _cut(text, MAX_MESSAGE)


def default_message(fields: MessageFields) -> str:
    """The message without a template: the watcher, outcome and purpose, the evidence's
    identity and when it was observed, then each retained leaf it holds, in allowlist order.
    On the native path the plain case (printable ASCII text, an instant in UTC, JSON scalars)
    is rendered there (``native/src/message.rs``); everything else here."""
    if NATIVE is not None:
        named = fields.named
        shown = tuple(named[name] for name in _DEFAULT_NAMED)
        native: str | None = NATIVE.default_message(
            shown,
            named["observed_at"],
            fields.leaves,
            fields.retained,
            MAX_VALUE,
            MAX_MESSAGE,
            ABSENT,
        )
        if native is not None:
            return native
    text = fields.text
    seen = (
        "poll" if fields.named["event_id"] is None else f"{text('event_type')} {text('event_id')}"
    )
    lines = [
        f"{text('watcher_id')}: {text('outcome')} (purpose {text('purpose')})",
        f"{seen} observed {text('observed_at')}",
    ]
    for path in fields.retained:
        found = fields.leaf(path)
        if found is not ABSENT:
            lines.append(f"{format_path(path)}: {found}")
    return _cut("\n".join(lines), MAX_MESSAGE)


def for_channel(text: str, channel: Channel) -> str:
    """``text`` escaped for ``channel``: unsafe characters (controls other than tab and line
    feed, bidirectional overrides, lone surrogates) become U+FFFD everywhere, a log line keeps
    to one line; at most :data:`MAX_MESSAGE` characters."""
    text = _UNSAFE.sub("\ufffd", text.replace("\r\n", "\n"))
    if channel is Channel.LOG:
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
    return _cut(text, MAX_MESSAGE)


def _text(value: Any) -> str:
    """A value as text on one line (so it cannot forge one): strings with line breaks and tabs
    as spaces and unsafe characters as U+FFFD, other JSON scalars as JSON writes them; at most
    :data:`MAX_VALUE` characters."""
    if not isinstance(value, str):
        return _cut(json.dumps(value), MAX_VALUE)
    text: str = value
    if not text.isprintable():  # printable text holds none of _BREAKS or _UNSAFE
        text = _UNSAFE.sub("\ufffd", _BREAKS.sub(" ", text))
    return _cut(text, MAX_VALUE)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
