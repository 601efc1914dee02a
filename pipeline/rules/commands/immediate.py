"""What an immediate verb writes: the outbox entry of a ``send`` (or a prompt's answer) now, and the
one grant the daemon ensures for its subject (DESIGN.md §2, §5, §8).

The entry is keyed by the request's delivery key (watcher ``verb:<verb>``, version 0, source
``control``, trigger the request id), a prompt's answer by its derived key, so a retried request
delivers once. Pure: ``now`` is a parameter. Left out: authorizing and writing the entry (the
command processor's ``send``) and who may ask at the edge (``dispatch``)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from pipeline.rules.authz import Action
from pipeline.rules.backoff import RetryPolicy
from pipeline.rules.commands.model import GrantSpec
from pipeline.rules.definition import PrivacyPolicy
from pipeline.rules.instants import utc
from pipeline.rules.keys import canonical_json, derived_delivery_key, request_delivery_key
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import Outcome

__all__ = [
    "ANSWER_STEP",
    "CONTROL_PURPOSE",
    "CONTROL_SOURCE",
    "GRANT_UNTIL",
    "answer_entry",
    "daemon_grant",
    "immediate_entry",
    "schedule_source",
]

CONTROL_PURPOSE: Final = "control.chat"
"""The purpose of every schedule and immediate verb the control plane creates."""
CONTROL_SOURCE: Final = "control"
ANSWER_STEP: Final = "answer"
GRANT_UNTIL: Final = datetime(
    2100, 1, 1, tzinfo=UTC
)  # fixed, so re-ensuring writes the same record


def schedule_source(chat: str) -> str:
    """A chat's schedules read source ``schedule:<chat>`` (DESIGN.md §10)."""
    return f"schedule:{chat}"


def immediate_entry(
    *,
    tenant_id: str,
    user_id: str,
    verb: str,
    request_id: str,
    chat: str,
    now: datetime,
    text: str | None = None,
    args: tuple[str, ...] | None = None,
    delivery_key: str | None = None,
) -> OutboxEntry:
    """The outbox entry of an immediate ``verb`` (``send``) for ``chat``, due ``now``.
    ``delivery_key`` overrides the request key (a prompt's derived answer key)."""
    now = utc(now)
    return OutboxEntry(
        delivery_key=delivery_key
        or request_delivery_key(
            tenant_id=tenant_id, user_id=user_id, verb=verb, request_id=request_id
        ),
        tenant_id=tenant_id,
        user_id=user_id,
        watcher_id=f"verb:{verb}",
        watcher_version=0,
        source_id=CONTROL_SOURCE,
        purpose=CONTROL_PURPOSE,
        trigger={"kind": "request", "request_id": request_id},
        outcome=Outcome.SATISFIED,
        verb=verb,
        target=chat,
        text=text,
        args=args,
        due_at=now,
        created_at=now,
        retry=RetryPolicy(),
        delivery_retention=PrivacyPolicy().delivery_retention,
    )


def answer_entry(prompt: OutboxEntry, answer: str, now: datetime) -> OutboxEntry:
    """The ``send`` carrying a prompt's answer: the prompt's watcher, trigger, due time and
    lateness, under the key derived from the prompt's, so running the agent twice for one
    prompt still delivers one answer. The one rule for immediate and fired prompts alike."""
    return prompt._replace(
        delivery_key=derived_delivery_key(prompt.delivery_key, ANSWER_STEP),
        verb="send",
        text=answer,
        args=None,
        created_at=utc(now),
    )


def daemon_grant(tenant_id: str, user_id: str, chats: Iterable[str]) -> tuple[str, GrantSpec]:
    """The grant the daemon ensures at start (DESIGN.md §5): its subject, over its chats and the
    ``schedule:<chat>``/``control`` sources, to evaluate, deliver and manage. Returns the request
    id to add it with — derived from the grant's content, so re-adding it is the same grant."""
    names = sorted(set(chats))
    spec = GrantSpec(
        tenant_id=tenant_id,
        user_id=user_id,
        purpose=CONTROL_PURPOSE,
        sources=tuple([CONTROL_SOURCE, *(schedule_source(c) for c in names)]),
        targets=tuple(names),
        actions=(Action.EVALUATE, Action.DELIVER, Action.MANAGE),
        until=GRANT_UNTIL,
    )
    digest = hashlib.sha256(canonical_json(spec.model_dump(mode="json"))).hexdigest()[:32]
    return f"daemon-grant:{digest}", spec
