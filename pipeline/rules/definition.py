"""The versioned watcher definition: what users write (DESIGN.md §9) and what every rule reads.

Owns :class:`WatcherDefinition` (its parts: ``definition_parts``), the id rules (safe
charset, bounded length, ``schedule:<chat>:<name>``), cross-field rules (mode, expiry, verbs,
retention) and the parsed and compiled conditions, cached per definition instance — compile
once per version. Sources live in ``sources``; the condition DSL in ``condition``; who may
create a definition is ``authz`` and the command processor's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Final

from pydantic import (
    Field,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.bounds import check_json
from pipeline.rules.budgets import BudgetCaps
from pipeline.rules.change import ChangePolicy
from pipeline.rules.condition import Condition, compile_condition, parse_condition
from pipeline.rules.definition_parts import (
    Delivery,
    DeliveryVerb,
    EntryFields,
    PrivacyPolicy,
    StrictModel,
)
from pipeline.rules.durations import Duration, format_duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.freshness import FUTURE_SKEW
from pipeline.rules.instants import Instant
from pipeline.rules.keys import delivery_key_prefix
from pipeline.rules.retention import check_retentions
from pipeline.rules.sources import (
    EventSource,
    PollingSource,
    ScheduleSource,
    checked_ref,
)

__all__ = [
    "AGENT_WINDOWS",
    "Delivery",
    "DeliveryVerb",
    "Mode",
    "PrivacyPolicy",
    "WatcherDefinition",
    "definition_errors",
    "parse_stored",
]

AGENT_WINDOWS: Final = frozenset(timedelta(hours=h) for h in (0.5, 1, 2, 6, 12, 24))
MAX_NODES: Final = 10_000
"""JSON values in one definition body, all nested values counted."""

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")
_SCHEDULE_ID = re.compile(
    r"schedule:([A-Za-z0-9][A-Za-z0-9._\-]{0,63}):([A-Za-z0-9][A-Za-z0-9._\-]{0,63})"
)
_PURPOSE = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")


class Mode(StrEnum):
    EVERY = "every"
    ONCE = "once"
    CHANGE = "change"


SourceField = Annotated[EventSource | PollingSource | ScheduleSource, Field(discriminator="kind")]


class WatcherDefinition(StrictModel):
    """One version of a watcher, owned by exactly one subject ``(tenant_id, user_id)``."""

    tenant_id: str
    user_id: str
    watcher_id: str
    version: int | None = Field(default=None, ge=1)
    purpose: str
    mode: Mode = Mode.EVERY
    change: ChangePolicy | None = None
    source: SourceField
    condition: dict[str, Any] | None = None
    terminal_condition: dict[str, Any] | None = None
    delivery: Delivery
    expires_at: Instant | None = None
    window: Duration | None = None
    session_id: str | None = None
    budgets: BudgetCaps | None = None
    retry: RetryPolicy = RetryPolicy()
    privacy: PrivacyPolicy = PrivacyPolicy()

    @field_validator("condition", "terminal_condition")
    @classmethod
    def _condition(cls, value: dict[str, Any] | None, info: Any) -> dict[str, Any] | None:
        if value is not None:
            parse_condition(value, field=info.field_name)
        return value

    @field_validator("budgets", mode="before")
    @classmethod
    def _budgets(cls, value: Any) -> Any:
        """Budget caps are ``budgets``' own model; its errors are renamed under ``budgets.``."""
        if not isinstance(value, Mapping):
            return value
        try:
            return BudgetCaps.model_validate(value)
        except DefinitionError as exc:
            raise DefinitionError(exc.message, f"budgets.{exc.field or 'window'}") from None

    @model_validator(mode="after")
    def _rules(self) -> WatcherDefinition:
        for name in ("tenant_id", "user_id"):
            checked_ref(getattr(self, name), name, _ID)
        self._check_ids()
        if len(self.purpose) > 128 or _PURPOSE.fullmatch(self.purpose) is None:
            raise DefinitionError("a purpose is dotted lowercase words, e.g. ops.alert", "purpose")
        if self.session_id is not None:
            checked_ref(self.session_id, "session_id")
        self._check_condition_and_verb()
        self._check_change()
        self._check_expiry()
        if self.delivery.template is not None:  # names only evidence the receipt keeps
            events = isinstance(self.source, EventSource)
            self.delivery.template.check(self.privacy.paths, events=events)
        check_retentions(self.privacy.evidence_retention, self.privacy.delivery_retention)
        if self.privacy.delivery_retention < self.source.max_age + FUTURE_SKEW:
            raise DefinitionError(
                "must cover source.max_age + 30s so a fresh replay meets its dedupe key",
                "privacy.delivery_retention",
            )
        return self

    def _check_ids(self) -> None:
        schedule = _SCHEDULE_ID.fullmatch(self.watcher_id)
        if self.watcher_id.startswith("schedule:"):
            if schedule is None:
                raise DefinitionError("a schedule id is schedule:<chat>:<name>", "watcher_id")
            if not isinstance(self.source, ScheduleSource):
                raise DefinitionError("schedule:<chat>:<name> needs a schedule source", "source")
            expected = f"schedule:{schedule.group(1)}"
            if self.source.source_id not in (None, expected):
                raise DefinitionError(f"a schedule's source is {expected}", "source.source_id")
        else:
            checked_ref(self.watcher_id, "watcher_id", _ID)
            if isinstance(self.source, ScheduleSource) and self.source.source_id is None:
                raise DefinitionError("a schedule source needs source_id", "source.source_id")

    def _check_condition_and_verb(self) -> None:
        is_schedule = isinstance(self.source, ScheduleSource)
        if not is_schedule and self.condition is None:
            raise DefinitionError("event and polling watchers need a condition", "condition")
        if self.terminal_condition is not None and self.mode is not Mode.ONCE:
            raise DefinitionError(
                "only a once watch has a terminal condition", "terminal_condition"
            )
        notify = self.delivery.verb is DeliveryVerb.NOTIFY
        if is_schedule == notify:
            rule = "send, prompt or run" if is_schedule else "notify"
            raise DefinitionError(f"this source's verb is {rule}", "delivery.verb")

    def _check_change(self) -> None:
        """``change`` options belong to a change watcher, which judges a condition over time."""
        if self.change is not None and self.mode is not Mode.CHANGE:
            raise DefinitionError("change options need mode change", "change")
        if self.mode is Mode.CHANGE and isinstance(self.source, ScheduleSource):
            raise DefinitionError("mode change is for event and polling watchers", "mode")

    def _check_expiry(self) -> None:
        if self.expires_at is not None and self.window is not None:
            raise DefinitionError("name expires_at or window, not both", "window")
        if self.window is not None:
            if self.mode is not Mode.ONCE:
                raise DefinitionError("a window bounds a once (agent) watch", "window")
            if self.window not in AGENT_WINDOWS:
                raise DefinitionError("window is 30m, 1h, 2h, 6h, 12h or 24h", "window")
            if self.session_id is None:
                raise DefinitionError("an agent watch is bound to its session", "session_id")
        elif self.expires_at is None and not isinstance(self.source, ScheduleSource):
            raise DefinitionError("a watcher needs expires_at (or a window)", "expires_at")

    @field_serializer("budgets", when_used="json")
    def _budgets_json(self, value: BudgetCaps | None) -> dict[str, Any] | None:
        if value is None:
            return None
        out: dict[str, Any] = value.model_dump(exclude_none=True)
        out["window"] = format_duration(value.window)
        return out

    # --- construction and the JSON shape -------------------------------------------------

    @classmethod
    def from_json(
        cls, obj: Mapping[str, Any], *, tenant_id: str, user_id: str
    ) -> WatcherDefinition:
        """Validate a user's definition for subject ``(tenant_id, user_id)``.

        Every rule violation raises :class:`DefinitionError` naming the field (``source.cron``);
        :func:`definition_errors` has them all.
        """
        errors, definition = definition_errors(obj, tenant_id=tenant_id, user_id=user_id)
        if definition is None:
            raise errors[0]
        return definition

    def to_json(self) -> dict[str, Any]:
        """The §9 JSON shape (durations as text, instants RFC 3339), defaults omitted."""
        out: dict[str, Any] = self.model_dump(mode="json", exclude_none=True)
        return out

    def with_version(self, version: int) -> WatcherDefinition:
        """This definition as accepted version ``version`` (assigned by the command processor).

        Read back from its own JSON, so what is stored is exactly what reads back; a definition
        that does not (a rule changed under a stored one) is a :class:`DefinitionError`.
        """
        return parse_stored(json.dumps({**self.to_json(), "version": version}))

    # --- derived, cached per instance (compile once per version) --------------------------

    @property
    def source_id(self) -> str:
        """The source id; a schedule ``schedule:<chat>:<name>`` reads ``schedule:<chat>``."""
        if self.source.source_id is not None:
            return self.source.source_id
        return self.watcher_id.rsplit(":", 1)[0]  # _check_ids allows None only for schedules

    @property
    def watcher_key(self) -> tuple[str, str, str]:
        return (self.tenant_id, self.user_id, self.watcher_id)

    @cached_property
    def key_prefix(self) -> bytes:
        """The encoded delivery-key fields this version fixes (``keys.delivery_key_from``)."""
        if self.version is None:
            raise DefinitionError("a keyed definition has an assigned version", "version")
        return delivery_key_prefix(
            tenant_id=self.tenant_id,
            user_id=self.user_id,
            watcher_id=self.watcher_id,
            watcher_version=self.version,
            source_id=self.source_id,
        )

    @cached_property
    def entry_fields(self) -> EntryFields:
        """What every outbox entry of this version carries (``outbox.build_entry``)."""
        if self.version is None:
            raise DefinitionError("a notifying definition has an assigned version", "version")
        delivery, schedule = self.delivery, isinstance(self.source, ScheduleSource)
        return EntryFields._make(
            (
                *(self.tenant_id, self.user_id, self.watcher_id, self.version, self.source_id),
                *(self.purpose, delivery.verb.value, delivery.target, self.retry),
                *(self.privacy.delivery_retention, delivery.text, delivery.args),
                *(delivery.quiet_hours, self.budgets, delivery.wake_session, self.session_id),
                delivery.verb is DeliveryVerb.NOTIFY,
                *(delivery.template, self.privacy.paths),
                self.watcher_id.rsplit(":", 1)[-1] if schedule else None,
            )
        )

    @cached_property
    def parsed_condition(self) -> Condition | None:
        return None if self.condition is None else parse_condition(self.condition)

    @cached_property
    def parsed_terminal(self) -> Condition | None:
        if self.terminal_condition is None:
            return None
        return parse_condition(self.terminal_condition, field="terminal_condition")

    @cached_property
    def predicate(self) -> Callable[[Mapping[str, Any]], bool]:
        """The compiled condition; a schedule (no condition) is always true."""
        if self.parsed_condition is None:
            return _always
        return compile_condition(self.parsed_condition)

    @cached_property
    def terminal_predicate(self) -> Callable[[Mapping[str, Any]], bool] | None:
        return None if self.parsed_terminal is None else compile_condition(self.parsed_terminal)

    def compile(self) -> WatcherDefinition:
        """Work out now everything evaluation derives from this version (conditions, the
        delivery-key prefix, the retained paths), as a long-running evaluator has; returns
        ``self``."""
        _ = self.predicate, self.terminal_predicate, self.privacy.paths
        if self.version is not None:
            _ = self.key_prefix
        return self

    def deadline(self, activated_at: datetime | None) -> datetime | None:
        """When the watch expires: ``expires_at``, or approval + ``window`` (agent watches)."""
        if self.expires_at is not None:
            return self.expires_at
        if self.window is not None and activated_at is not None:
            return activated_at + self.window
        return None


def definition_errors(
    obj: Any, *, tenant_id: str, user_id: str
) -> tuple[list[DefinitionError], WatcherDefinition | None]:
    """The definition, or what is wrong with ``obj``: every error pydantic finds in one pass,
    or the one rule that stopped it (``definition_check`` runs this until nothing new shows)."""
    if not isinstance(obj, Mapping):
        return [DefinitionError("a definition is a JSON object", None)], None
    try:
        check_json(obj, None, max_nodes=MAX_NODES)
        body = dict(obj)
        _fill_schedule_source_id(body)
        for name, value in (("tenant_id", tenant_id), ("user_id", user_id)):
            if body.setdefault(name, value) != value:
                raise DefinitionError("does not match the caller's subject", name)
        try:
            text = json.dumps(body, default=str, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise DefinitionError(f"not JSON: {exc}", None) from None
        return [], WatcherDefinition.model_validate_json(text)
    except DefinitionError as exc:
        return [exc], None
    except ValidationError as exc:
        return [_definition_error(error) for error in exc.errors()], None


def parse_stored(text: str | bytes) -> WatcherDefinition:
    """A definition as stored (registry, ``watchers``, ``definition-log``): any failure to read
    it back is a :class:`DefinitionError`, never another exception."""
    try:
        return WatcherDefinition.model_validate_json(text)
    except ValidationError as exc:
        error = _definition_error(exc.errors()[0])
        raise DefinitionError(f"stored definition: {error.message}", error.field) from None


def _fill_schedule_source_id(body: dict[str, Any]) -> None:
    """A schedule ``schedule:<chat>:<name>`` reads source ``schedule:<chat>`` (§10)."""
    match = _SCHEDULE_ID.fullmatch(str(body.get("watcher_id", "")))
    source = body.get("source")
    if match and isinstance(source, Mapping) and source.get("kind") == "schedule":
        body["source"] = {"source_id": f"schedule:{match.group(1)}", **source}


def _always(_payload: Mapping[str, Any]) -> bool:
    return True


_UNION_TAGS: Final = frozenset({"event", "polling", "schedule"})


def _definition_error(error: ErrorDetails) -> DefinitionError:
    """One pydantic error as a DefinitionError naming its dotted field."""
    parts: list[str] = []
    loc = error["loc"]
    for i, part in enumerate(loc):
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        elif i == 1 and loc[0] == "source" and part in _UNION_TAGS:
            continue
        else:
            parts.append(str(part))
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    return DefinitionError(message, ".".join(parts) or None)
