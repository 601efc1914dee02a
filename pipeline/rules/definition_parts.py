"""The parts of a watcher definition that stand on their own: where a decision goes
(:class:`Delivery`: target, verb, text, message template or arguments, quiet hours) and what
records keep and for how long (:class:`PrivacyPolicy`). The whole definition and its cross-field
rules are ``definition``'s; sources are ``sources``'; templates are ``message``'s.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any, Final, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    field_validator,
    model_validator,
)

from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.durations import Duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.message import MessageTemplate, parse_template
from pipeline.rules.paths import Path
from pipeline.rules.privacy import parse_retain_paths
from pipeline.rules.quiet_hours import QuietHours
from pipeline.rules.sources import checked_ref

__all__ = [
    "MAX_ARGS",
    "MAX_TEXT",
    "Delivery",
    "DeliveryVerb",
    "EntryFields",
    "PrivacyPolicy",
    "StrictModel",
]

MAX_TEXT: Final = 4096
MAX_ARGS: Final = 64


class DeliveryVerb(StrEnum):
    NOTIFY = "notify"
    SEND = "send"
    PROMPT = "prompt"
    RUN = "run"


class StrictModel(BaseModel):
    """A definition part: frozen, no unknown fields, no coercion."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Delivery(StrictModel):
    """Where a decision goes: an opaque target reference and the verb with its arguments."""

    target: str
    verb: DeliveryVerb = DeliveryVerb.NOTIFY
    text: str | None = None
    message: str | None = None
    args: tuple[str, ...] | None = None
    quiet_hours: QuietHours | None = None
    wake_session: bool = False

    @field_validator("quiet_hours", mode="wrap")
    @classmethod
    def _quiet_hours(cls, value: Any, handler: Any) -> Any:
        """Quiet hours are their own model; their errors are named under ``delivery.``."""
        try:
            return handler(value)
        except DefinitionError as exc:
            raise DefinitionError(exc.message, f"delivery.{exc.field}") from None

    @model_validator(mode="after")
    def _valid(self) -> Delivery:
        checked_ref(self.target, "delivery.target")
        needs_text = self.verb in (DeliveryVerb.SEND, DeliveryVerb.PROMPT)
        if needs_text != (self.text is not None):
            rule = "needs" if needs_text else "takes no"
            raise DefinitionError(f"verb {self.verb.value} {rule} text", "delivery.text")
        if self.text is not None and not 0 < len(self.text) <= MAX_TEXT:
            raise DefinitionError(f"text is 1..{MAX_TEXT} characters", "delivery.text")
        if self.message is not None and self.verb is not DeliveryVerb.NOTIFY:
            raise DefinitionError(f"verb {self.verb.value} takes no message", "delivery.message")
        _ = self.template
        needs_args = self.verb is DeliveryVerb.RUN
        if needs_args != (self.args is not None):
            rule = "needs" if needs_args else "takes no"
            raise DefinitionError(f"verb {self.verb.value} {rule} args", "delivery.args")
        if self.args is not None and not 0 < len(self.args) <= MAX_ARGS:
            raise DefinitionError(f"run takes 1..{MAX_ARGS} args", "delivery.args")
        return self

    @cached_property
    def template(self) -> MessageTemplate | None:
        """``message`` parsed once (``pipeline.rules.message``); ``None`` without one."""
        return None if self.message is None else parse_template(self.message)


class PrivacyPolicy(StrictModel):
    """What receipts keep (allowlisted scalar leaves) and for how long records live."""

    retain_paths: tuple[str, ...] = ()
    evidence_retention: Duration = timedelta(days=7)
    delivery_retention: Duration = timedelta(days=30)

    @field_validator("retain_paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_retain_paths(value)
        return value

    @cached_property
    def paths(self) -> tuple[Path, ...]:
        """``retain_paths`` parsed once, for the per-evaluation filter."""
        return parse_retain_paths(self.retain_paths)


class EntryFields(NamedTuple):
    """What every outbox entry of one definition version carries, read from it once
    (``WatcherDefinition.entry_fields``): ``outbox.build_entry`` and the native decider
    (``native/src/decide.rs``, by position) copy it instead of walking the definition's parts
    per notification. The first sixteen are the entry's own; the rest decide how it is built."""

    tenant_id: str
    user_id: str
    watcher_id: str
    version: int
    source_id: str
    purpose: str
    verb: str
    target: str
    retry: RetryPolicy
    delivery_retention: timedelta
    text: str | None
    args: tuple[str, ...] | None
    quiet_hours: QuietHours | None
    budgets: BudgetCaps | None
    wake_session: bool
    session_id: str | None
    notify: bool  # the entry carries a rendered message
    template: MessageTemplate | None
    retained: tuple[Path, ...]
    schedule_name: str | None  # a schedule's fires only
