"""What makes a watch an agent watch (seed 003, DESIGN.md §10): every proposal is one.

Owns :data:`AGENT_EVALUATORS` (the pinned ``key@version`` evaluators an agent watch may use),
:func:`proposal_body` (fills in what a proposal may omit) and :func:`check_agent_watch` (seed 003's
bounds, listed there). The window and cadence sets are ``definition.AGENT_WINDOWS`` and
``sources.CADENCES``; who may propose and the three-active cap are the command processor's."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from pipeline.rules.definition import Mode, WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.pinned import REGISTERED, check_registered_states
from pipeline.rules.sources import PollingSource

__all__ = ["AGENT_EVALUATORS", "check_agent_watch", "generated_id", "proposal_body"]

AGENT_EVALUATORS: Final = frozenset(REGISTERED)
"""The pinned evaluators of seed 003; an agent watch names one of them exactly."""
_WINDOW: Final = "an agent watch has a window of 30m, 1h, 2h, 6h, 12h or 24h (not expires_at)"


def generated_id(request_id: str) -> str:
    """The id of a proposal that names none: derived from its request, stable across retries."""
    return "p-" + hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:16]


def proposal_body(
    body: Mapping[str, Any], *, request_id: str, session_id: str | None
) -> dict[str, Any]:
    """``body`` with what a proposal may leave out filled in: its id (derived from the request
    id, so a retried request names the same watch), mode ``once`` and, for a session-bound
    caller, that caller's session."""
    filled = dict(body)
    if filled.get("watcher_id") is None:
        filled["watcher_id"] = generated_id(request_id)
    if filled.get("mode") is None:
        filled["mode"] = Mode.ONCE.value
    elif filled["mode"] != Mode.ONCE.value:
        raise DefinitionError("a proposal is an agent watch: mode once", "mode")
    if filled.get("window") is None:
        raise DefinitionError(_WINDOW, "window")
    if session_id is not None and filled.get("session_id") is None:
        filled["session_id"] = session_id
    return filled


def check_agent_watch(definition: WatcherDefinition) -> None:
    """Refuse (:class:`DefinitionError`) a proposal that is not a bounded agent watch: mode
    ``once``, a ``window`` from the allowed set (never ``expires_at``), a polling source on a
    pinned evaluator with a ``cadence`` of 1, 5, 15 or 60 minutes (never a cron), a session, and
    conditions naming only the evaluator's registered states (``pinned``)."""
    if definition.mode is not Mode.ONCE:
        raise DefinitionError("a proposal is an agent watch: mode once", "mode")
    if definition.window is None:
        raise DefinitionError(_WINDOW, "window")
    source = definition.source
    if not isinstance(source, PollingSource):
        raise DefinitionError("an agent watch polls a pinned evaluator", "source.kind")
    if source.tool not in AGENT_EVALUATORS:
        pinned = ", ".join(sorted(AGENT_EVALUATORS))
        raise DefinitionError(f"an agent watch's evaluator is one of {pinned}", "source.tool")
    if source.cadence is None:
        raise DefinitionError("an agent watch runs on a cadence of 1m, 5m, 15m or 60m", "source")
    if definition.session_id is None:
        raise DefinitionError("an agent watch is bound to its session", "session_id")
    check_registered_states(definition)
