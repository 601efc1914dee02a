"""Who a control-socket peer is: the configured user, or an agent (DESIGN.md §10).

Owns :class:`PeerIdentity`, the daemon's one rule, in order:

0. a request whose peer process is gone, or whose pid now names another process (its start time
   changed since it connected), is refused (unauthenticated): an agent that connects, forks and
   exits leaves a descendant holding the connection whose ancestry can no longer be read;
1. a request bearing ``VIGIL_AGENT_TOKEN`` is that live run's agent; an unknown or expired
   token is refused (unauthenticated), never the user;
2. a peer whose process is an agent run's, or descends from one — by parent chain, or by the
   run's process group or session, which a double fork keeps — is that run's agent, also after
   the run ended (what a run leaves behind stays the agent);
3. a peer under ``[agent] run_as``'s uid that no run claims is still an agent (a session of
   its own): the uid survives any fork, setsid included;
4. anyone else the socket let in (our uid, ``SO_PEERCRED``) is the configured user.

Without ``run_as``, rules 1–2 are the whole isolation — by process ancestry only, best effort:
a process that drops its token, calls ``setsid`` and double-forks becomes the user. The daemon
says so at start.

Left out: reading ``/proc`` (``isolation``), the runs and tokens (``agent``), the socket
(``socket.server``) and what the principal may do (``core``, the command processor).
"""

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
    """The rule above for one daemon: its user, its agent runs and its agent uid (if any)."""

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
