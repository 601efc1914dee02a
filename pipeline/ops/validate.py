"""Offline checks of what users write: definition files and event lines, every problem at once, each
placed as ``FILE:line:col: field.path: message (hint)``.

Owns reading a definition file (JSON or YAML, without YAML 1.1's surprises), placing a dotted field
in it, :class:`EventLine` and the freshness warnings an event's ``observed_at`` earns. No broker.
Left out: the rules (``pipeline.rules.definition_check``, ``pipeline.records.event``) and the
command line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import yaml
from pydantic import ValidationError

from pipeline.records.event import EventLine, line_record
from pipeline.rules.bounds import MAX_DURATION
from pipeline.rules.definition_check import Problem, definition_problems, is_proposal
from pipeline.rules.durations import format_duration
from pipeline.rules.errors import DefinitionError
from pipeline.rules.freshness import FUTURE_SKEW
from pipeline.rules.instants import parse_instant

__all__ = [
    "EventLine",
    "Finding",
    "check_definition_text",
    "check_event_line",
    "load_definition",
    "parse_event_line",
]

_TOKENS: Final = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem (or, with ``warning``, a doubt) placed in a file; ``str()`` is its line."""

    file: str
    line: int
    column: int
    field: str | None
    message: str
    hint: str | None = None
    warning: bool = False

    def __str__(self) -> str:
        kind = "warning: " if self.warning else ""
        where = f"{self.field}: " if self.field else ""
        hint = f" ({self.hint})" if self.hint else ""
        return f"{self.file}:{self.line}:{self.column}: {kind}{where}{self.message}{hint}"


class _Loader(yaml.SafeLoader):
    """YAML without YAML 1.1's surprises: instants stay text (``expires_at``), ``22:00`` is not
    the sexagesimal number 1320, so a definition reads the same as its JSON twin."""


_DROPPED: Final = frozenset({"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:int"})
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _DROPPED]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"), list("-+0123456789")
)


class _SyntaxProblem(Exception):
    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(message)
        self.line, self.column, self.message = line, column, message


def _parse(text: str) -> Any:
    """JSON, or YAML when it does not look like JSON; a syntax error says where it stopped
    (a truncated JSON file is reported as JSON, not as a YAML puzzle)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip()[:1] in ("{", "["):
            raise _SyntaxProblem(exc.lineno, exc.colno, f"not JSON: {exc.msg}") from None
    except ValueError as exc:
        raise _SyntaxProblem(1, 1, f"not JSON: {exc}") from None
    except RecursionError:  # the C decoder gives up on deep nesting this way, not as a ValueError
        raise _SyntaxProblem(1, 1, "nested too deeply") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise _SyntaxProblem(line, column, f"neither JSON nor YAML: {problem}") from None
    except RecursionError:
        raise _SyntaxProblem(1, 1, "nested too deeply") from None


def load_definition(text: str) -> dict[str, Any]:
    """A definition body from JSON or YAML text; :class:`DefinitionError` when it is neither
    (saying where it stopped) or not an object."""
    try:
        value = _parse(text)
    except _SyntaxProblem as exc:
        raise DefinitionError(f"line {exc.line}, column {exc.column}: {exc.message}") from None
    if not isinstance(value, dict):
        raise DefinitionError("a definition is a JSON or YAML object")
    return value


def _tree(text: str) -> yaml.Node | None:
    """The node tree of ``text`` for positions; ``None`` when YAML cannot read it (some JSON)."""
    try:
        return yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError):
        return None


def _position(root: yaml.Node | None, field: str | None, message: str) -> tuple[int, int]:
    """1-based line and column of ``field`` (``condition.all[0]``) in ``root``: the value, or
    the key for an unknown field, or the closest enclosing node that exists."""
    if root is None:
        return 1, 1
    node: yaml.Node = root
    mark = root.start_mark
    for name, index in _TOKENS.findall(field or ""):
        if isinstance(node, yaml.MappingNode) and name:
            pair = next((p for p in node.value if getattr(p[0], "value", None) == name), None)
            if pair is None:
                break
            mark = pair[0].start_mark if message == "unknown field" else pair[1].start_mark
            node = pair[1]
        elif isinstance(node, yaml.SequenceNode) and index and int(index) < len(node.value):
            node = node.value[int(index)]
            mark = node.start_mark
        else:
            break
    return mark.line + 1, mark.column + 1


def check_definition_text(
    text: str, file: str, *, tenant_id: str, user_id: str, proposal: bool | None = False
) -> list[Finding]:
    """Every problem of the definition in ``text`` (named ``file``), in file order. With
    ``proposal=None`` a body that can only be an agent watch is checked as a proposal."""
    try:
        body = _parse(text)
    except _SyntaxProblem as exc:
        return [Finding(file, exc.line, exc.column, None, exc.message)]
    if proposal is None:
        proposal = is_proposal(body)
    problems = definition_problems(body, tenant_id=tenant_id, user_id=user_id, proposal=proposal)
    root = _tree(text) if problems else None
    found = [_place(problem, file, root) for problem in problems]
    return sorted(found, key=lambda f: (f.line, f.column))


def _place(problem: Problem, file: str, root: yaml.Node | None, line_offset: int = 0) -> Finding:
    line, column = _position(root, problem.field, problem.message)
    return Finding(file, line + line_offset, column, problem.field, problem.message, problem.hint)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_event_line(text: str) -> tuple[EventLine, datetime]:
    """The validated line and its observed_at instant; :class:`DefinitionError` otherwise."""
    problems, parsed = _event_problems(text)
    if parsed is None:
        first = problems[0]
        raise DefinitionError(first.message, first.field)
    return parsed


def check_event_line(
    text: str,
    file: str,
    line: int,
    *,
    now: datetime,
    max_age: timedelta | None = None,
) -> tuple[list[Finding], tuple[EventLine, datetime] | None]:
    """Problems and warnings of event line ``line`` of ``file``, and the event when it has no
    problem. Warnings: ``observed_at`` after ``now`` + 30 s (the evaluator calls it
    ``future_skew``) or before ``now - max_age`` (``stale``; without ``max_age``, the longest
    a definition may name)."""
    problems, parsed = _event_problems(text)
    root = _tree(text) if problems else None
    found = [_place(problem, file, root, line - 1) for problem in problems]
    if parsed is not None:
        doubt = _freshness_doubt(parsed[1], now, max_age)
        if doubt is not None:
            column = _position(_tree(text), "observed_at", "")[1]
            message, hint = doubt
            found.append(Finding(file, line, column, "observed_at", message, hint, warning=True))
    return found, parsed


def _freshness_doubt(
    observed_at: datetime, now: datetime, max_age: timedelta | None
) -> tuple[str, str | None] | None:
    """Why a watcher would not count an event observed then, as message and hint, if it would
    not."""
    if observed_at > now + FUTURE_SKEW:
        return (
            f"more than {format_duration(FUTURE_SKEW)} after now: every watcher will judge it "
            "future_skew",
            "use the time the event happened, in UTC",
        )
    window = max_age if max_age is not None else MAX_DURATION
    if observed_at < now - window:
        return (
            f"older than {format_duration(window)}: a watcher with that max_age will judge it "
            "stale",
            None if max_age is not None else "no watcher may have a longer max_age",
        )
    return None


def _event_problems(text: str) -> tuple[list[Problem], tuple[EventLine, datetime] | None]:
    try:
        data = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        return [Problem(None, f"not JSON (column {exc.colno}): {exc.msg}")], None
    except (ValueError, RecursionError) as exc:
        return [Problem(None, f"not JSON: {exc}")], None
    if not isinstance(data, dict):
        return [Problem(None, "expected a JSON object")], None
    try:
        line = EventLine.model_validate(data)
    except ValidationError as exc:
        return [_event_problem(error) for error in exc.errors()], None
    try:
        observed_at = parse_instant(line.observed_at, "observed_at")
        line_record(line, observed_at)
    except DefinitionError as exc:
        return [Problem(exc.field, exc.message)], None
    return [], (line, observed_at)


def _event_problem(error: Any) -> Problem:
    field = ".".join(str(part) for part in error["loc"]) or None
    if error["type"] == "extra_forbidden":
        known = ", ".join(EventLine.model_fields)
        return Problem(field, "unknown field", f"known fields: {known}")
    return Problem(field, str(error["msg"]))
