"""The whole pipeline with ``vigil api`` in front, for the delivery routes, the console and the
browser tests: :class:`~tests.integration.erasure_stack.Stack` (command processor, evaluator,
ticker, delivery on threads, one :class:`~pipeline.clock.ManualClock`) plus the API app built
exactly as ``vigil api`` builds it, with the principals of ``api_harness`` (tenant ``acme``).

The webhook destination ``hook`` is :attr:`Stack.receiver`; the grants :meth:`Stack.grants`
adds let the owner's ``ops.alert`` watchers on ``shared.src`` deliver there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from pipeline.cli.api_cmd import build_services
from pipeline.config import parse_config
from pipeline.control.http.api import create_app
from pipeline.control.status import StatusReader
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec
from pipeline.rules.commands.immediate import daemon_grant
from tests.integration.api_harness import (
    RUNS,
    TENANT,
    USER,
    agent_watch,
    principals_table,
    token_of,
)
from tests.integration.erasure_stack import PARTITIONS, Stack
from tests.receiver import Receiver

__all__ = [
    "TENANT",
    "USER",
    "ConsoleStack",
    "agent_watch",
    "console_stack",
    "event_watcher",
    "token_of",
]


def event_watcher(watcher_id: str, event_type: str, *, target: str = "hook") -> dict[str, Any]:
    """An ``ops.alert`` watcher on ``shared.src`` firing when ``status`` is ``failed``."""
    return {
        "watcher_id": watcher_id,
        "purpose": "ops.alert",
        "source": {
            "kind": "event",
            "source_id": "shared.src",
            "event_type": event_type,
            "max_age": "10m",
        },
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": target, "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
        "privacy": {"retain_paths": ["status"]},
    }


class ConsoleStack(Stack):
    """The stack and the API app over it (``app``; ``api`` is a TestClient of it)."""

    def __init__(self, bootstrap: str, redis_url: str, receiver: Receiver) -> None:
        super().__init__(bootstrap, redis_url, receiver, name="console")
        config = parse_config(
            {
                "kafka": {
                    "bootstrap_servers": bootstrap,
                    "topic_prefix": self.topology.prefix,
                    "partitions": PARTITIONS,
                },
                "subject": {"tenant_id": TENANT, "user_id": USER, "timezone": "UTC"},
                "chats": {"me": {"kind": "console"}},
                "redis": {"url": redis_url},
                "principals": principals_table(),
                "api": {"rate": 100_000, "burst": 1_000_000, "sign_in_per_minute": 10_000},
            }
        )
        services, close = build_services(config, pool_size=2, clock=self.clock, keks=self.keks)
        self._exit.callback(close)
        # The header reads this stack's budget keys (its workers charge under their prefix).
        status = StatusReader(bootstrap, self.topology, self.clock, self.budgets())
        services = replace(services, status=status)
        self.app: FastAPI = create_app(services)
        self.api = TestClient(self.app)
        self._exit.callback(self.api.close)

    def agent_grants(self) -> None:
        """What agent watches of the owner need: propose, approve, manage on ``run:r-*``."""
        until = datetime(2030, 1, 1, tzinfo=UTC)
        spec = GrantSpec(
            tenant_id=TENANT,
            user_id=USER,
            purpose="agent.watch",
            sources=tuple(f"run:{run}" for run in RUNS),
            tools=("workflow.run.status@v1",),
            targets=("in-app",),
            actions=(Action.PROPOSE, Action.APPROVE, Action.MANAGE),
            until=until,
        )
        self.ok(CommandVerb.GRANT_ADD, TENANT, USER, grant=spec)

    def chat_schedule(self, name: str, cron: str, text: str) -> None:
        """A cron schedule ``send TEXT`` in chat ``me`` (UTC), made over ``/v1`` by the owner
        under the daemon's grant (added here)."""
        _, spec = daemon_grant(TENANT, USER, ["me"])
        self.ok(CommandVerb.GRANT_ADD, TENANT, USER, grant=spec)
        schedule = {
            "watcher_id": f"schedule:me:{name}",
            "purpose": spec.purpose,
            "source": {"kind": "schedule", "cron": cron, "timezone": "UTC"},
            "delivery": {"target": "me", "verb": "send", "text": text},
        }
        made = self.call("POST", "/v1/watches", json=schedule)
        assert made.status_code == 201, made.text

    def call(self, method: str, path: str, who: str = "owner", **kwargs: Any) -> Any:
        """One ``/v1`` request as principal ``who``."""
        headers = {
            "Authorization": f"Bearer {token_of(who)}",
            "Vigil-Protocol-Version": "1",
            **kwargs.pop("headers", {}),
        }
        return self.api.request(method, path, headers=headers, **kwargs)


@contextmanager
def console_stack(bootstrap: str, redis_url: str, receiver: Receiver) -> Iterator[ConsoleStack]:
    stack = ConsoleStack(bootstrap, redis_url, receiver)
    try:
        yield stack
    finally:
        stack.close()
