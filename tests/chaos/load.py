"""The known load of a fault scenario: a subject, its grant and watchers made through the command
processor as an operator makes them, events published as upstream services publish them, and the
delivery keys all of it must produce.

:class:`Subject` issues commands with a :class:`~pipeline.control.client.CommandClient` (each
acknowledged result is remembered for the checker); :func:`event_watcher` and
:func:`polling_watcher` are the definitions the scenarios use (webhook destination
:data:`~tests.chaos.stack.HOOK`, condition ``status == "failed"`` / ``"down"``, budgets from the
operator's defaults); :class:`EventLoad` publishes events of which every third satisfies its
watcher, riding out a broker that is away (long message timeout, a flush retried until it
lands: a republished event has the same trigger identity, so it never makes a second key).

Left out: what is checked (``tests.chaos.checker``) and the processes (``tests.chaos.stack``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pipeline.clock import Clock
from pipeline.control.client import CommandClient, operator_principal
from pipeline.kafka.topics import Topology
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandResult, CommandVerb, GrantSpec
from pipeline.rules.commands.immediate import CONTROL_PURPOSE, schedule_source
from pipeline.rules.errors import BrokerError
from pipeline.rules.instants import rfc3339_seconds
from pipeline.rules.keys import EventTrigger, InstantTrigger, delivery_key, watcher_key
from producers.publish.publisher import EventPublisher
from tests.chaos.stack import HOOK, TOOL, Stack

__all__ = [
    "EVENT_TYPE",
    "PURPOSE",
    "EventLoad",
    "Subject",
    "event_watcher",
    "minutes_between",
    "poll_key",
    "polling_watcher",
    "schedule_watcher",
]

EVENT_TYPE: Final = "build.finished"
PURPOSE: Final = "ops.alert"
UNTIL: Final = datetime(2099, 1, 1, tzinfo=UTC)
_EXPIRES: Final = "2099-01-01T00:00:00Z"
_RIDE_OUT_MS: Final = 300_000  # a publisher waits out a broker restart or stall


def event_watcher(
    watcher_id: str, source_id: str, max_age: str = "1h", retention: str | None = None
) -> dict[str, Any]:
    """An event watcher; ``retention``: how long settled deliveries are kept before purged."""
    body = {
        "watcher_id": watcher_id,
        "purpose": PURPOSE,
        "source": {
            "kind": "event",
            "source_id": source_id,
            "event_type": EVENT_TYPE,
            "max_age": max_age,
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": HOOK, "verb": "notify"},
        "expires_at": _EXPIRES,
        "privacy": {"retain_paths": ["status"]},
    }
    if retention is not None:
        body["privacy"] = {"retain_paths": ["status"], "delivery_retention": retention}
    return body


def polling_watcher(
    watcher_id: str,
    source_id: str,
    *,
    expires_at: datetime | None = None,
    max_age: str = "1h",
    retention: str | None = None,
) -> dict[str, Any]:
    """A watcher polling the governed tool every minute with the ``bounded`` missed-run policy
    (no due instant is ever dropped), until ``expires_at``."""
    body: dict[str, Any] = {
        "watcher_id": watcher_id,
        "purpose": PURPOSE,
        "source": {
            "kind": "polling",
            "source_id": source_id,
            "tool": "http.json@v1",
            "tool_ref": TOOL,
            "cron": "* * * * *",
            "timezone": "UTC",
            "missed": {"bounded": 100},
            "max_age": max_age,
        },
        "condition": {"eq": ["status", "down"]},
        "delivery": {"target": HOOK, "verb": "notify"},
        "expires_at": _EXPIRES if expires_at is None else rfc3339_seconds(expires_at),
    }
    if retention is not None:
        body["privacy"] = {"delivery_retention": retention}
    return body


def poll_key(
    tenant: str, user: str, watcher_id: str, source_id: str, at: datetime, kind: str = "poll"
) -> str:
    """The delivery key of one poll (or schedule) tick of a version-1 watcher."""
    return delivery_key(
        tenant_id=tenant,
        user_id=user,
        watcher_id=watcher_id,
        watcher_version=1,
        source_id=source_id,
        trigger=InstantTrigger("poll" if kind == "poll" else "schedule", at),
    )


def schedule_watcher(chat: str, name: str, text: str, expires_at: datetime) -> dict[str, Any]:
    """A cron schedule that sends ``text`` to ``chat`` every minute, as ``vigil schedule``
    makes one (``schedule:<chat>:<name>``, source ``schedule:<chat>``)."""
    return {
        "watcher_id": f"schedule:{chat}:{name}",
        "purpose": CONTROL_PURPOSE,
        "source": {"kind": "schedule", "cron": "* * * * *", "timezone": "UTC"},
        "delivery": {"target": chat, "verb": "send", "text": text},
        "expires_at": rfc3339_seconds(expires_at),
    }


@dataclass
class Subject:
    """One subject's commands, and every answer its clients were given (for the checker)."""

    tenant: str
    user: str
    bootstrap: str
    topology: Topology
    clock: Clock
    answered: dict[str, CommandResult] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)

    @classmethod
    def fresh(cls, stack: Stack, prefix: str = "t") -> Subject:
        """A subject no earlier run used (its budget keys start empty)."""
        tenant = f"{prefix}-{uuid.uuid4().hex[:8]}"
        return cls(tenant, "u-1", stack.bootstrap, stack.topology, stack.clock)

    def client(self, timeout_s: float = 15.0) -> CommandClient:
        return CommandClient(self.bootstrap, self.topology, timeout_s=timeout_s, clock=self.clock)

    def send(
        self, client: CommandClient, verb: CommandVerb, *, retries: int = 6, **fields: Any
    ) -> CommandResult:
        """One command, waited for (again and again while the processor is away)."""
        principal = operator_principal(self.tenant, self.user)
        command = client.command(verb, principal, self.tenant, self.user, **fields)
        self.sent.add(command.request_id)
        result = client.send(command, retries=retries)
        self.answered[command.request_id] = result
        return result

    def grant(self, client: CommandClient, sources: Iterable[str]) -> None:
        spec = GrantSpec(
            tenant_id=self.tenant,
            user_id=self.user,
            purpose=PURPOSE,
            sources=tuple(sources),
            tools=("http.json@v1", TOOL),
            targets=(HOOK,),
            actions=(Action.EVALUATE, Action.DELIVER, Action.MANAGE),
            until=UNTIL,
        )
        result = self.send(client, CommandVerb.GRANT_ADD, grant=spec)
        assert result.ok, result.error

    def control_grant(self, client: CommandClient, chat: str) -> None:
        """What the daemon grants its subject: schedules of ``chat`` that send to it."""
        spec = GrantSpec(
            tenant_id=self.tenant,
            user_id=self.user,
            purpose=CONTROL_PURPOSE,
            sources=(schedule_source(chat),),
            targets=(chat,),
            actions=(Action.EVALUATE, Action.DELIVER, Action.MANAGE),
            until=UNTIL,
        )
        result = self.send(client, CommandVerb.GRANT_ADD, grant=spec)
        assert result.ok, result.error

    def create(self, client: CommandClient, definition: dict[str, Any]) -> CommandResult:
        result = self.send(client, CommandVerb.CREATE, definition=definition)
        assert result.ok, result.error
        return result

    def watcher_key(self, watcher_id: str) -> str:
        return watcher_key(self.tenant, self.user, watcher_id)


class EventLoad:
    """Events for ``watchers`` (watcher id → its source id), one source per watcher: event ``i``
    goes to watcher ``i mod n`` and satisfies it when ``i`` is divisible by 3."""

    def __init__(
        self, bootstrap: str, topology: Topology, subject: Subject, watchers: dict[str, str]
    ) -> None:
        self._subject = subject
        self._watchers = list(watchers.items())
        self._publisher = EventPublisher(
            bootstrap, topology, overrides={"message.timeout.ms": _RIDE_OUT_MS}
        )
        self.published = 0
        self.failures: list[str] = []  # the flushes that failed (each batch is sent again)

    def _target(self, i: int) -> tuple[str, str]:
        return self._watchers[i % len(self._watchers)]

    def publish(self, start: int, stop: int, *, pause_s: float = 0.0, batch: int = 200) -> None:
        """Events ``start`` … ``stop - 1``, flushed every ``batch`` (re-sent while a flush
        fails), ``pause_s`` between batches."""
        for first in range(start, stop, batch):
            last = min(stop, first + batch)
            while True:
                now = self._subject.clock.now()
                try:
                    for i in range(first, last):
                        _, source = self._target(i)
                        status = "failed" if i % 3 == 0 else "passed"
                        payload = {"status": status, "n": i}
                        self._publisher.publish(source, EVENT_TYPE, f"e-{i}", payload, now)
                    self._publisher.flush(_RIDE_OUT_MS / 1000)
                    break
                except BrokerError as exc:
                    self.failures.append(f"{datetime.now(UTC):%H:%M:%S} {exc}")
                    time.sleep(1.0)
            self.published = last
            if pause_s:
                time.sleep(pause_s)

    def expected(self, start: int, stop: int) -> set[str]:
        """The delivery keys events ``start`` … ``stop - 1`` make."""
        keys = set()
        for i in range(start - start % 3 + (3 if start % 3 else 0), stop, 3):
            watcher_id, source = self._target(i)
            keys.add(
                delivery_key(
                    tenant_id=self._subject.tenant,
                    user_id=self._subject.user,
                    watcher_id=watcher_id,
                    watcher_version=1,
                    source_id=source,
                    trigger=EventTrigger(EVENT_TYPE, f"e-{i}"),
                )
            )
        return keys


def minutes_between(first: datetime, last: datetime) -> list[datetime]:
    """Every whole UTC minute in ``(first, last]``: a ``* * * * *`` cron's instants."""
    at = first.replace(second=0, microsecond=0) + timedelta(minutes=1)
    out = []
    while at <= last:
        out.append(at)
        at += timedelta(minutes=1)
    return out
