"""Who a control-socket peer is: the configured user, or an agent (DESIGN.md §10).

Owns :class:`PeerIdentity`, the daemon's one rule (its docstring lists the order). Without ``[agent]
run_as`` it isolates by process ancestry only, best effort, and the daemon says so at start. Left
out: reading ``/proc`` (``isolation``), runs and tokens (``agent``), the socket (``socket.server``)
and what the principal may do (``core``, the command processor)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipeline.control.agent import AgentTokens
from pipeline.control.isolation import ProcessInfo, process_chain
from pipeline.control.socket.server import Peer
from pipeline.rules.authz import Principal

__all__ = ["PeerIdentity"]


@dataclass(frozen=True, slots=True)
class PeerIdentity:
    """The rule for one daemon (its user, its agent runs and its agent uid), in order:

    0. a peer whose process is gone, or whose pid now names another process, is refused
       (unauthenticated): a forked descendant's ancestry can no longer be read;
    1. a request bearing ``VIGIL_AGENT_TOKEN`` is that live run's agent; an unknown or expired token
       is refused, never the user;
    2. a peer that is, or descends from, an agent run's process (parent chain, process group or
       session) is that run's agent, also after the run ended;
    3. a peer under ``[agent] run_as``'s uid that no run claims is an agent of its own session;
    4. anyone else the socket let in (``SO_PEERCRED``) is the configured user."""

    user: Principal
    tokens: AgentTokens
    agent_uid: int | None = None
    chain: Callable[[int], list[ProcessInfo]] = process_chain

    def of(self, peer: Peer, token: object) -> Principal | None:
        """The peer's principal; None when it bears a token no live run holds, or its
        process is gone or changed since it connected (fail-closed)."""
        if not peer.unchanged():
            return None
        if token is not None:
            run = self.tokens.by_token(str(token))
            return None if run is None else run.principal
        run = self.tokens.by_process(self.chain(peer.pid))
        if run is not None:
            return run.principal
        if self.agent_uid is not None and peer.uid == self.agent_uid:
            return self.tokens.stray(peer.uid)
        return self.user
