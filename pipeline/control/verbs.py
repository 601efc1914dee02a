"""The control plane's verbs on the wire: request and response models and the schedule grammar.

Owns one pydantic model per verb (``send``, ``prompt``, ``query``, ``run``, ``schedule``, ``list``,
``cancel``; DESIGN.md §5, seed 001) discriminated by ``verb``, :class:`VerbResponse` (ok, or a
:class:`VerbErrorKind`) and the argv grammar a schedule wraps, validated at creation; ``--in``,
``--at`` and ``--cron`` are required and exclusive. Left out: chats, local time and executing
(``dispatch``) and the transports."""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from pipeline.rules.errors import DefinitionError

__all__ = [
    "MAX_ARGS",
    "MAX_TEXT",
    "NAME_PATTERN",
    "SCHEDULABLE",
    "Action",
    "AnyRequest",
    "CancelRequest",
    "ListRequest",
    "PromptAction",
    "PromptRequest",
    "QueryRequest",
    "RunAction",
    "RunRequest",
    "ScheduleRequest",
    "SendAction",
    "SendRequest",
    "VerbError",
    "VerbErrorKind",
    "VerbName",
    "VerbRequest",
    "VerbResponse",
    "action_argv",
    "parse_action",
    "parse_request",
]

MAX_TEXT: Final = 4096
MAX_ARGS: Final = 64
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)


class VerbName(StrEnum):
    SEND = "send"
    PROMPT = "prompt"
    QUERY = "query"
    RUN = "run"
    SCHEDULE = "schedule"
    LIST = "list"
    CANCEL = "cancel"


SCHEDULABLE: Final = frozenset({VerbName.SEND, VerbName.PROMPT, VerbName.RUN})


class VerbErrorKind(StrEnum):
    """Why a verb failed: the command processor's codes plus the transport's own."""

    INVALID = "invalid"  # a bad argument; ``field`` names it
    DENIED = "denied"  # role or grant
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"  # a schedule name already taken (use --update)
    UNAUTHENTICATED = "unauthenticated"  # wrong peer or unknown agent token
    MALFORMED = "malformed"  # the line is not a JSON object
    UNKNOWN_VERB = "unknown_verb"
    TOO_LARGE = "too_large"  # the line exceeds the daemon's bound
    UNAVAILABLE = "unavailable"  # broker, agent or daemon did not answer
    STARTING = "starting"  # the daemon is up but its control grant is not in place yet
    BUSY = "busy"  # every connection slot is answering a request (or this idle one was taken)
    INTERNAL = "internal"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
Chat = Annotated[str, Field(pattern=NAME_PATTERN)]
Name = Annotated[str, Field(pattern=NAME_PATTERN)]
Args = Annotated[
    tuple[Annotated[str, Field(min_length=1)], ...], Field(min_length=1, max_length=MAX_ARGS)
]


class _Request(_Model):
    chat: Chat | None = None  # --chat, else $VIGIL_CHAT_ID; None: the sole configured chat
    token: str | None = Field(default=None, max_length=256)  # $VIGIL_AGENT_TOKEN, if any


# --- what a schedule may wrap ------------------------------------------------------------------


class SendAction(_Model):
    verb: Literal["send"] = "send"
    text: Text


class PromptAction(_Model):
    verb: Literal["prompt"] = "prompt"
    text: Text


class RunAction(_Model):
    verb: Literal["run"] = "run"
    args: Args  # the script, then its arguments


Action = Annotated[SendAction | PromptAction | RunAction, Field(discriminator="verb")]


def parse_action(argv: Sequence[str], field: str = "argv") -> SendAction | PromptAction | RunAction:
    """The verb a schedule wraps, from its argv: ``send TEXT…``, ``prompt TEXT…`` (words joined
    by one space, as ``echo`` would) or ``run SCRIPT [ARG…]``. Anything else is refused now."""
    if not argv:
        raise DefinitionError("name the verb to schedule: send, prompt or run", field)
    head, rest = argv[0], list(argv[1:])
    try:
        verb = VerbName(head)
    except ValueError:
        raise DefinitionError(
            f"unknown verb {head!r}: schedule send, prompt or run", field
        ) from None
    if verb not in SCHEDULABLE:
        raise DefinitionError(f"{verb.value} cannot be scheduled: only send, prompt or run", field)
    try:
        if verb is VerbName.RUN:
            return RunAction(args=tuple(rest))
        text = " ".join(rest)
        return SendAction(text=text) if verb is VerbName.SEND else PromptAction(text=text)
    except ValidationError as exc:
        raise _invalid(exc, field) from None


def action_argv(action: SendAction | PromptAction | RunAction) -> list[str]:
    """The normalized argv a schedule stores and ``list`` shows."""
    if isinstance(action, RunAction):
        return ["run", *action.args]
    return [action.verb, action.text]


# --- requests -----------------------------------------------------------------------------------


class SendRequest(_Request):
    """Deliver text verbatim to the chat, through the outbox, now."""

    verb: Literal["send"] = "send"
    text: Text


class PromptRequest(_Request):
    """Run the agent on the text in a fresh process; deliver its answer to the chat."""

    verb: Literal["prompt"] = "prompt"
    text: Text


class QueryRequest(_Request):
    """Run the agent on the text and return the answer to the caller; deliver nothing."""

    verb: Literal["query"] = "query"
    text: Text


class RunRequest(_Request):
    """Start an allowlisted script with vigil's context in its environment; fire and forget.
    A fired schedule's run (delivery asks the daemon) names its delivery key and schedule."""

    verb: Literal["run"] = "run"
    args: Args
    delivery_key: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    schedule_name: Name | None = None
    schedule_time: Annotated[str, Field(max_length=64)] | None = None


class ScheduleRequest(_Request):
    """``schedule (--in D | --at TS | --cron EXPR) [--name N] [--update] -- VERB ARGS…``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    verb: Literal["schedule"] = "schedule"
    in_: str | None = Field(default=None, alias="in")
    at: str | None = None
    cron: str | None = None
    name: Name | None = None
    update: bool = False
    argv: tuple[str, ...]

    @model_validator(mode="after")
    def _grammar(self) -> ScheduleRequest:
        given = [
            flag
            for flag, value in (("in", self.in_), ("at", self.at), ("cron", self.cron))
            if value
        ]
        if len(given) != 1:
            found = ", ".join(f"--{g}" for g in given) or "none"
            raise DefinitionError(f"give exactly one of --in, --at, --cron (got {found})", "timing")
        parse_action(self.argv)
        return self

    @property
    def action(self) -> SendAction | PromptAction | RunAction:
        return parse_action(self.argv)


class ListRequest(_Request):
    verb: Literal["list"] = "list"


class CancelRequest(_Request):
    verb: Literal["cancel"] = "cancel"
    name: Name


AnyRequest = (
    SendRequest
    | PromptRequest
    | QueryRequest
    | RunRequest
    | ScheduleRequest
    | ListRequest
    | CancelRequest
)
VerbRequest = Annotated[AnyRequest, Field(discriminator="verb")]
_REQUEST: Final[TypeAdapter[AnyRequest]] = TypeAdapter(VerbRequest)


def parse_request(body: object) -> AnyRequest:
    """A request from its JSON object. :class:`DefinitionError` names the bad field; an unknown
    ``verb`` says so with field ``verb``."""
    if not isinstance(body, dict):
        raise DefinitionError("a request is a JSON object", None)
    verb = body.get("verb")
    if verb not in {v.value for v in VerbName}:
        raise DefinitionError(
            f"unknown verb {verb!r}: one of {', '.join(v.value for v in VerbName)}", "verb"
        )
    try:
        return _REQUEST.validate_python(body)
    except ValidationError as exc:
        raise _invalid(exc, None) from None


def _invalid(exc: ValidationError, prefix: str | None) -> DefinitionError:
    """The first pydantic error as a DefinitionError naming its dotted field (rule errors
    raised by validators are DefinitionErrors already and pass through pydantic untouched)."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"] if not isinstance(part, int)]
    loc = [p for p in loc if p not in {v.value for v in VerbName}]
    field = ".".join(([prefix] if prefix else []) + loc) or prefix
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    return DefinitionError(message, field or None)


# --- responses ----------------------------------------------------------------------------------


class VerbError(_Model):
    code: VerbErrorKind
    message: str
    field: str | None = None


class VerbResponse(_Model):
    """One line back: ``{"ok": true, "result": {...}}`` or ``{"ok": false, "error": {...}}``."""

    ok: bool
    result: dict[str, Any] | None = None
    error: VerbError | None = None

    @classmethod
    def success(cls, **result: Any) -> VerbResponse:
        return cls(ok=True, result=result)

    @classmethod
    def failure(cls, code: VerbErrorKind, message: str, field: str | None = None) -> VerbResponse:
        return cls(ok=False, error=VerbError(code=code, message=message, field=field))
