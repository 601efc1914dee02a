"""The transport-agnostic control-plane core: ``dispatch(request, principal, chat) → response``.

Owns what each verb means once a caller is authenticated and its chat resolved (DESIGN.md §5, §10;
seed 001; :class:`Dispatcher` spells it out), :func:`resolve_chat` and :meth:`Dispatcher.handle`
(raw JSON → :class:`VerbResponse`, never raising). Transports only authenticate and frame; timing
and the ``list`` shape are ``schedules``'; grants, limits and ownership are the command
processor's."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol
from zoneinfo import ZoneInfo

from pipeline.clock import Clock
from pipeline.control.run import RunStarted
from pipeline.control.schedules import schedule_id, schedule_view, timing_source
from pipeline.control.verbs import (
    AnyRequest,
    CancelRequest,
    ListRequest,
    PromptRequest,
    QueryRequest,
    RunAction,
    RunRequest,
    ScheduleRequest,
    SendRequest,
    VerbErrorKind,
    VerbResponse,
    parse_request,
)
from pipeline.rules.authz import Principal, Role, Subject, Verb, may
from pipeline.rules.commands.immediate import CONTROL_PURPOSE, schedule_source
from pipeline.rules.commands.model import Command, CommandResult, CommandVerb, ResultCode
from pipeline.rules.errors import BrokerError, ConfigError, DefinitionError, VigilError
from pipeline.rules.instants import parse_instant
from pipeline.rules.keys import request_delivery_key

__all__ = [
    "AgentPort",
    "CommandPort",
    "Dispatcher",
    "RunPort",
    "Subjecthood",
    "resolve_chat",
    "user_principal",
]

log = logging.getLogger(__name__)

_HANDLE_BYTES: Final = 3  # a generated name: "s" + 6 hex digits
_CODES: Final[dict[ResultCode, VerbErrorKind]] = {
    ResultCode.INVALID: VerbErrorKind.INVALID,
    ResultCode.DENIED: VerbErrorKind.DENIED,
    ResultCode.NOT_FOUND: VerbErrorKind.NOT_FOUND,
    ResultCode.CONFLICT: VerbErrorKind.CONFLICT,
    ResultCode.STALE_REVISION: VerbErrorKind.CONFLICT,
    ResultCode.CAP_REACHED: VerbErrorKind.CONFLICT,
}
_VERBS: Final[dict[str, Verb]] = {
    "send": Verb.SEND,
    "prompt": Verb.PROMPT,
    "query": Verb.QUERY,
    "run": Verb.RUN,
    "schedule": Verb.SCHEDULE,
    "list": Verb.LIST,
    "cancel": Verb.CANCEL,
}


class CommandPort(Protocol):
    """What dispatch needs of :class:`~pipeline.control.client.CommandClient`."""

    def command(
        self, verb: CommandVerb, principal: Principal, tenant_id: str, user_id: str, **fields: Any
    ) -> Command: ...

    def send(self, command: Command) -> CommandResult: ...


class AgentPort(Protocol):
    def ask(self, text: str, chat: str) -> str: ...


class RunPort(Protocol):
    def check(self, args: Sequence[str]) -> Any: ...

    def start(
        self,
        args: Sequence[str],
        *,
        chat: str,
        delivery_key: str,
        schedule_name: str | None = None,
        schedule_time: datetime | None = None,
    ) -> RunStarted: ...


@dataclass(frozen=True, slots=True)
class Subjecthood:
    """Who the daemon serves: its subject, its chats and its local zone."""

    tenant_id: str
    user_id: str
    chats: tuple[str, ...]
    zone: ZoneInfo

    @property
    def subject(self) -> Subject:
        return Subject(self.tenant_id, self.user_id)


def user_principal(tenant_id: str, user_id: str) -> Principal:
    """The socket peer, authenticated as the configured subject."""
    return Principal(
        name=f"daemon:{tenant_id}/{user_id}", role=Role.USER, tenant_id=tenant_id, user_id=user_id
    )


def resolve_chat(requested: str | None, chats: Sequence[str]) -> str:
    """The target chat: the one named (``--chat`` or ``$VIGIL_CHAT_ID``), else the only one."""
    if requested is not None:
        if requested not in chats:
            known = ", ".join(sorted(chats)) or "none"
            raise DefinitionError(f"no chat {requested!r} is configured (chats: {known})", "chat")
        return requested
    if len(chats) == 1:
        return chats[0]
    if not chats:
        raise DefinitionError("no chat is configured: add a [chats.NAME] table", "chat")
    raise DefinitionError(
        f"several chats are configured ({', '.join(sorted(chats))}): name one with --chat", "chat"
    )


class Dispatcher:
    """Executes verbs for one subject. Thread-safe: command round trips are serialized (the command
    client is one consumer); agents and scripts run concurrently, outside the lock.

    - ``schedule`` is a ``schedule`` (``--update``: ``schedule_update``) command on the watcher
      ``schedule:<chat>:<name>``; ``list`` and ``cancel`` read and cancel those watchers;
    - ``send`` is a ``send`` command (the processor writes its outbox entry); ``prompt`` runs the
      agent here, outside any transaction, then sends its answer keyed by a key derived from the
      prompt's; ``query`` returns the answer and delivers nothing; ``run`` starts an allowlisted
      script (also a fired schedule's, asked for by delivery).
    - Before the agent step of ``prompt``, ``query`` and ``run``, the processor authorizes the verb
      against the subject's grants (seed 000), so revoking the daemon's grant locks them all.
    - Roles are checked here (:func:`pipeline.rules.authz.may`) and again by the processor, which
      sees the asserted principal and decides grants, limits and ownership, fail-closed."""

    def __init__(
        self,
        who: Subjecthood,
        *,
        commands: CommandPort,
        agent: AgentPort,
        runner: RunPort,
        clock: Clock,
    ) -> None:
        self._who = who
        self._commands = commands
        self._agent = agent
        self._runner = runner
        self._clock = clock
        self._lock = threading.Lock()

    # -- the seam --------------------------------------------------------------------------

    def handle(self, body: object, principal: Principal) -> VerbResponse:
        """A raw JSON body in, a response out; never raises."""
        try:
            request = parse_request(body)
            chat = resolve_chat(request.chat, self._who.chats)
            return self.dispatch(request, principal, chat)
        except DefinitionError as exc:
            kind = VerbErrorKind.UNKNOWN_VERB if exc.field == "verb" else VerbErrorKind.INVALID
            return VerbResponse.failure(kind, exc.message, exc.field)
        except ConfigError as exc:
            return VerbResponse.failure(VerbErrorKind.UNAVAILABLE, str(exc))
        except BrokerError as exc:
            return VerbResponse.failure(VerbErrorKind.UNAVAILABLE, str(exc))
        except VigilError as exc:
            return VerbResponse.failure(VerbErrorKind.UNAVAILABLE, str(exc))
        except Exception:
            log.exception("verb failed")
            return VerbResponse.failure(
                VerbErrorKind.INTERNAL, "internal error (see the daemon log)"
            )

    def dispatch(self, request: AnyRequest, principal: Principal, chat: str) -> VerbResponse:
        """Execute ``request`` for ``principal`` against ``chat`` (already resolved). Raises
        :class:`VigilError` subclasses for bad input or unreachable services."""
        decision = may(principal, _VERBS[request.verb], self._who.subject)
        if not decision.allowed:
            return VerbResponse.failure(VerbErrorKind.DENIED, decision.detail)
        match request:
            case SendRequest():
                return self._send(request, principal, chat)
            case PromptRequest():
                return self._prompt(request, principal, chat)
            case QueryRequest():
                return self._query(request, principal, chat)
            case RunRequest():
                return self._run(request, principal, chat)
            case ScheduleRequest():
                return self._schedule(request, principal, chat)
            case ListRequest():
                return self._list(principal, chat)
            case CancelRequest():
                return self._cancel(request, principal, chat)
        raise DefinitionError(f"unknown verb {request.verb!r}", "verb")

    # -- immediate verbs -------------------------------------------------------------------

    def _send(self, request: SendRequest, principal: Principal, chat: str) -> VerbResponse:
        """The command processor authorizes the send and writes its outbox entry (§2)."""
        result = self._round_trip(CommandVerb.SEND, principal, target=chat, text=request.text)
        return _delivered(result, chat)

    def _prompt(self, request: PromptRequest, principal: Principal, chat: str) -> VerbResponse:
        """Run the agent here, outside any transaction, then send its answer as a command whose
        key the processor derives from this prompt's request id: one prompt, one answer."""
        return self._ask_and_send(request.text, principal, chat, secrets.token_hex(16))

    def reply(self, text: str, chat: str, turn_id: str) -> VerbResponse:
        """A turn of ``chat``'s conversation (a message its person wrote): a ``prompt`` of the
        daemon's own subject whose answer is keyed by ``turn_id``, so a turn run again after a
        crash is answered once."""
        principal = user_principal(self._who.tenant_id, self._who.user_id)
        return self._ask_and_send(text, principal, chat, turn_id)

    def say(self, text: str, chat: str) -> VerbResponse:
        """The daemon's own word to ``chat`` (a ``send`` of its subject), e.g. a polite refusal."""
        principal = user_principal(self._who.tenant_id, self._who.user_id)
        return self._send(SendRequest(text=text), principal, chat)

    def _ask_and_send(
        self, text: str, principal: Principal, chat: str, prompt_id: str
    ) -> VerbResponse:
        refused = self._authorized(CommandVerb.PROMPT, principal, chat)
        if refused is not None:
            return refused
        answer = self._agent.ask(text, chat)
        result = self._round_trip(
            CommandVerb.SEND, principal, target=chat, text=answer, answer_to=prompt_id
        )
        return _delivered(result, chat)

    def _query(self, request: QueryRequest, principal: Principal, chat: str) -> VerbResponse:
        refused = self._authorized(CommandVerb.QUERY, principal, chat)
        if refused is not None:
            return refused
        return VerbResponse.success(chat=chat, answer=self._agent.ask(request.text, chat))

    def _run(self, request: RunRequest, principal: Principal, chat: str) -> VerbResponse:
        """Start the script here, for an immediate run and a fired schedule's alike (delivery
        asks with the entry's key and schedule), once the command processor authorizes it."""
        refused = self._authorized(CommandVerb.RUN, principal, chat)
        if refused is not None:
            return refused
        key = request.delivery_key or request_delivery_key(
            tenant_id=self._who.tenant_id,
            user_id=self._who.user_id,
            verb="run",
            request_id=secrets.token_hex(16),
        )
        fired = request.schedule_time
        started = self._runner.start(
            request.args,
            chat=chat,
            delivery_key=key,
            schedule_name=request.schedule_name,
            schedule_time=None if fired is None else parse_instant(fired, "schedule_time"),
        )
        return VerbResponse.success(
            chat=chat, script=str(started.script), pid=started.pid, delivery_key=key
        )

    # -- schedules -------------------------------------------------------------------------

    def _schedule(self, request: ScheduleRequest, principal: Principal, chat: str) -> VerbResponse:
        action = request.action
        if isinstance(action, RunAction):
            if principal.role is Role.AGENT:
                return VerbResponse.failure(
                    VerbErrorKind.DENIED, "an agent schedules send or prompt, never run", "argv"
                )
            self._runner.check(action.args)
        now = self._clock.now()
        source = timing_source(request, now, self._who.zone)
        name = request.name or "s" + secrets.token_hex(_HANDLE_BYTES)
        delivery: dict[str, Any] = {"target": chat, "verb": action.verb}
        if isinstance(action, RunAction):
            delivery["args"] = list(action.args)
        else:
            delivery["text"] = action.text
        definition = {
            "watcher_id": schedule_id(chat, name),
            "purpose": CONTROL_PURPOSE,
            "source": source,
            "delivery": delivery,
        }
        verb = CommandVerb.SCHEDULE_UPDATE if request.update else CommandVerb.SCHEDULE
        result = self._round_trip(
            verb, principal, watcher_id=schedule_id(chat, name), definition=definition
        )
        if result.error is not None:
            if result.error.code is ResultCode.CONFLICT and not request.update:
                return VerbResponse.failure(
                    VerbErrorKind.CONFLICT,
                    f"a schedule named {name!r} already exists in chat {chat!r}: "
                    "use --update to replace it",
                    "name",
                )
            return _failure(result)
        view = schedule_view(result.result or {}, now)
        assert view is not None
        return VerbResponse.success(**view, updated=(result.result or {}).get("version", 1) > 1)

    def _list(self, principal: Principal, chat: str) -> VerbResponse:
        # The chat's schedules only (their source is the chat's): the processor filters, so a
        # subject with thousands of watchers answers with just these.
        result = self._round_trip(CommandVerb.LIST, principal, source_id=schedule_source(chat))
        if result.error is not None:
            return _failure(result)
        now = self._clock.now()
        prefix = schedule_id(chat, "")
        entries = [
            view
            for watcher in (result.result or {}).get("watchers", [])
            if str(watcher.get("watcher_id", "")).startswith(prefix)
            and (view := schedule_view(watcher, now)) is not None
        ]
        entries.sort(key=lambda e: (e["next_fire"] or "", e["name"]))
        return VerbResponse.success(chat=chat, schedules=entries)

    def _cancel(self, request: CancelRequest, principal: Principal, chat: str) -> VerbResponse:
        result = self._round_trip(
            CommandVerb.CANCEL, principal, watcher_id=schedule_id(chat, request.name)
        )
        if result.error is not None:
            if result.error.code in (ResultCode.NOT_FOUND, ResultCode.CONFLICT):
                # A fired one-shot is closed: for its owner it is as gone as one never made.
                return VerbResponse.failure(
                    VerbErrorKind.NOT_FOUND,
                    f"no schedule named {request.name!r} in chat {chat!r}",
                    "name",
                )
            return _failure(result)
        return VerbResponse.success(chat=chat, name=request.name, cancelled=True)

    # -- helpers ---------------------------------------------------------------------------

    def _authorized(
        self, verb: CommandVerb, principal: Principal, chat: str
    ) -> VerbResponse | None:
        """None when the command processor authorizes ``verb`` for ``chat`` now (seed 000:
        fail-closed against the subject's grants); the refusal otherwise."""
        result = self._round_trip(verb, principal, target=chat)
        return None if result.error is None else _failure(result)

    def _round_trip(self, verb: CommandVerb, principal: Principal, **fields: Any) -> CommandResult:
        who = self._who
        command = self._commands.command(verb, principal, who.tenant_id, who.user_id, **fields)
        with self._lock:
            return self._commands.send(command)


def _delivered(result: CommandResult, chat: str) -> VerbResponse:
    if result.error is not None:
        return _failure(result)
    return VerbResponse.success(chat=chat, delivery_key=(result.result or {})["delivery_key"])


def _failure(result: CommandResult) -> VerbResponse:
    error = result.error
    assert error is not None
    return VerbResponse.failure(_CODES[error.code], error.message, error.field)
