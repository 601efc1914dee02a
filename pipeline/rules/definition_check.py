"""Every problem of a definition body at once, each with a hint: what ``vigil watch validate`` and
``watch create`` report before anything reaches a broker.

Owns :func:`definition_problems` (bounded by the number of top-level fields; cross-section rules add
at most one problem), :class:`Problem` and :func:`hint_for`. The command processor uses
:meth:`WatcherDefinition.from_json` instead (one refusal). Left out: where a field sits in its file
(``pipeline.ops.validate``) and printing."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, get_args

from pydantic import BaseModel

from pipeline.rules.agent_watch import check_agent_watch, proposal_body
from pipeline.rules.bounds import check_json
from pipeline.rules.condition import CompareOp
from pipeline.rules.definition import MAX_NODES, Mode, WatcherDefinition, definition_errors
from pipeline.rules.errors import DefinitionError

__all__ = ["Problem", "definition_problems", "hint_for", "is_proposal"]

_OPERATORS: Final = ("all", "any", "not", *(op.value for op in CompareOp), "contains", "exists")
_HINTS: Final[dict[str, str]] = {
    "mode": "one of " + ", ".join(m.value for m in Mode),
    "source.kind": "one of event, polling, schedule",
    "source.missed": 'one of "skip", "latest", {"bounded": n} with 1 <= n <= 100',
    "source.timezone": "an IANA zone such as UTC or Europe/Berlin",
    "delivery.verb": "notify for event and polling sources; send, prompt or run for schedules",
    "expires_at": "RFC 3339 with an offset, e.g. 2027-06-01T00:00:00Z",
    "window": "30m, 1h, 2h, 6h, 12h or 24h",
    "purpose": "dotted lowercase words, e.g. ops.alert",
}
_SAID: Final = ("one of", "Input should be", "use e.g.", " is 30m")
_DURATION_FIELDS: Final = ("max_age", "cadence", "window", "base", "cap", "retention")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a body: the dotted ``field`` (``source.max_age``; ``None`` for the
    body as a whole), what is wrong, and what to write instead when that can be said."""

    field: str | None
    message: str
    hint: str | None = None


def definition_problems(
    body: Any, *, tenant_id: str, user_id: str, proposal: bool = False
) -> list[Problem]:
    """Everything wrong with ``body`` as a definition of subject ``(tenant_id, user_id)``;
    empty when :meth:`WatcherDefinition.from_json` accepts it. A ``proposal`` is first filled
    in as the command processor fills one (id, mode ``once``) and held to seed 003's bounds."""
    if not isinstance(body, Mapping):
        return [Problem(None, "a definition is a JSON or YAML object")]
    try:
        check_json(body, None, max_nodes=MAX_NODES)
    except DefinitionError as exc:
        return [_problem(exc)]
    if proposal:
        try:
            body = proposal_body(body, request_id="validate", session_id="validate")
        except DefinitionError as exc:
            return [_problem(exc)]
    found: list[Problem] = []
    remaining = dict(body)
    for _ in range(len(WatcherDefinition.model_fields) + 2):
        errors, definition = definition_errors(remaining, tenant_id=tenant_id, user_id=user_id)
        if definition is not None:
            if proposal and not found:
                try:
                    check_agent_watch(definition)
                except DefinitionError as exc:
                    found.append(_problem(exc))
            break
        cut = False
        for error in errors:
            top = (error.field or "").split(".")[0].split("[")[0]
            if error.message == "Field required" and top in body and top not in remaining:
                continue  # set aside on an earlier run: already reported
            problem = _problem(error)
            if problem not in found:
                found.append(problem)
            if top in remaining:
                del remaining[top]
                cut = True
        if not cut:
            break
    return found


def is_proposal(body: Any) -> bool:
    """Whether ``body`` can only be an agent watch, which is always proposed: it names a
    ``window`` or a ``session_id`` (``create`` refuses both)."""
    return isinstance(body, Mapping) and ("window" in body or "session_id" in body)


def hint_for(field: str | None, message: str) -> str | None:
    """What to write instead, when a field's problem has a known cure."""
    if field is None:
        return None
    last = field.rsplit(".", 1)[-1]
    if message == "unknown field":
        known = _known_names(field)
        close = difflib.get_close_matches(last, known, n=1)
        if close:
            return f"did you mean {close[0]!r}?"
        return "known fields: " + ", ".join(sorted(known)) if known else None
    if "operator" in message or message.startswith("a condition is"):
        return "operators: " + " ".join(_OPERATORS)
    if field in _HINTS:
        return _HINTS[field]
    if any(last.endswith(name) for name in _DURATION_FIELDS) and "duration" in message:
        return "a duration such as 45s, 10m, 1h30m or 2d"
    return None


def _problem(error: DefinitionError) -> Problem:
    hint = hint_for(error.field, error.message)
    if hint is not None and any(said in error.message for said in _SAID):
        hint = None  # the message already says what to write
    return Problem(error.field, error.message, hint)


def _known_names(field: str) -> tuple[str, ...]:
    """The field names allowed next to ``field`` (top level or one model down)."""
    parts = field.split(".")
    fields = WatcherDefinition.model_fields
    if len(parts) == 1:
        return tuple(fields)
    parent = fields.get(parts[0])
    if parent is None:
        return ()
    names: set[str] = set()
    for model in _models_of(parent.annotation):
        names.update(model.model_fields)
    return tuple(names)


def _models_of(annotation: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        item = stack.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            found.append(item)
        else:
            stack.extend(get_args(item))
    return found
