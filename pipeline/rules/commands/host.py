"""The host's powers stay with the host (DESIGN.md §10): who may have vigil ``run`` a script or
``prompt`` the agent on the daemon's machine.

Owns :class:`Host` (the daemon's subject and chats) and :func:`host_verdict`: a ``run`` or
``prompt``, now or scheduled, over any edge, belongs to the host's subject, under the control
purpose, for one of its chats; :data:`NO_HOST` allows nobody. The command processor and delivery
both ask it. Left out: grants (``context``, ``control``) and starting the script or agent."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from pipeline.rules.commands.immediate import CONTROL_PURPOSE

__all__ = ["HOST_VERBS", "NO_HOST", "Host", "HostVerdict", "host_verdict", "refusal_text"]

HOST_VERBS: Final = frozenset({"run", "prompt", "query"})
"""Verbs that act on the daemon's machine (``query`` is a prompt whose answer is returned)."""


class HostVerdict(StrEnum):
    """Whether a host verb may be asked for, or the first thing that is not the host's."""

    ALLOWED = "allowed"
    NO_HOST = "no_host"  # this process was told of no daemon subject
    OTHER_SUBJECT = "other_subject"
    OTHER_PURPOSE = "other_purpose"
    OTHER_CHAT = "other_chat"

    @property
    def allowed(self) -> bool:
        return self is HostVerdict.ALLOWED


@dataclass(frozen=True, slots=True)
class Host:
    """The daemon's subject and the chats it serves."""

    tenant_id: str
    user_id: str
    chats: frozenset[str]

    @classmethod
    def of(cls, tenant_id: str, user_id: str, chats: Iterable[str]) -> Host:
        return cls(tenant_id, user_id, frozenset(chats))


NO_HOST: Final = Host("", "", frozenset())


def host_verdict(
    host: Host, verb: str, *, tenant_id: str, user_id: str, purpose: str, target: str
) -> HostVerdict:
    """May ``verb`` for ``(tenant_id, user_id)``, ``purpose`` and ``target`` be asked for?
    Verbs that do not act on the host (``send``, ``notify``) always may (grants decide them)."""
    if verb not in HOST_VERBS:
        return HostVerdict.ALLOWED
    if not host.tenant_id:
        return HostVerdict.NO_HOST
    if (tenant_id, user_id) != (host.tenant_id, host.user_id):
        return HostVerdict.OTHER_SUBJECT
    if purpose != CONTROL_PURPOSE:
        return HostVerdict.OTHER_PURPOSE
    if target not in host.chats:
        return HostVerdict.OTHER_CHAT
    return HostVerdict.ALLOWED


def refusal_text(verdict: HostVerdict, verb: str) -> str:
    """One line saying why ``verb`` was refused (seed 001: run and prompt are the daemon's)."""
    why = {
        HostVerdict.NO_HOST: "this processor serves no daemon subject",
        HostVerdict.OTHER_SUBJECT: "only the daemon's own subject may ask for it",
        HostVerdict.OTHER_PURPOSE: f"only under purpose {CONTROL_PURPOSE!r}",
        HostVerdict.OTHER_CHAT: "only for one of the daemon's configured chats",
    }.get(verdict, "")
    return f"{verb} acts on the daemon's host: {why}; another subject may send or notify"
