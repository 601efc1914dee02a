"""What a hostile megabyte costs the command processor (DESIGN.md §10 "Hostile input").

``python -m benchmarks.hostile`` prints one JSON object. Each case is a 1 MB reference field
shaped to hit a different credential expression's worst case (plain letters, ``a:`` pairs for
the userinfo scan, digits for the token scan, dotted host-like text for the URL scan), refused
three ways: by :func:`~pipeline.rules.sources.checked_ref` alone, by
:meth:`WatcherDefinition.from_json` as ``delivery.target``, and by the command processor's
whole decision (:func:`~pipeline.records.command.command_from_value` then
:func:`~pipeline.rules.commands.apply`) of a ``create`` carrying it. The baseline, in the same
run, is the same decision accepting an honest definition; ``ratio`` = refusal / acceptance.
Goal (issue 14): each refusal < 50 ms (before: ~9 s for 80 KB, minutes for 900 KB). Each
figure is the best of several repeats. A run takes a few seconds.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from pipeline.crypto import KeyEncryptionKeys, KeyRing, generate_kek_text
from pipeline.kafka.serde import default_codec
from pipeline.records.command import command_from_value
from pipeline.rules.authz import Action, Grant
from pipeline.rules.commands import GrantRecord, apply
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.sources import checked_ref

__all__ = ["main"]

MEGABYTE = 1_000_000
REPEATS = 5
GOAL_MS = 50.0
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TENANT, USER = "acme", "u-42"
_RING = KeyRing(KeyEncryptionKeys.parse(generate_kek_text()), default_codec())  # plain commands
SHAPES = {
    "letters": "a",
    "userinfo_pairs": "a:",
    "digits": "1",
    "dotted_host": "a.b",
}
BODY: dict[str, Any] = {
    "watcher_id": "release-build-failed",
    "purpose": "ops.alert",
    "source": {"kind": "event", "source_id": "ci", "event_type": "build", "max_age": "10m"},
    "condition": {"eq": ["status", "failed"]},
    "delivery": {"target": "ops-hook"},
    "expires_at": "2030-01-01T00:00:00Z",
}
GRANTS = {
    "g-1": GrantRecord(
        Grant(
            grant_id="g-1",
            tenant_id=TENANT,
            user_id=USER,
            purpose="ops.alert",
            sources=frozenset({"ci"}),
            targets=frozenset({"ops-hook"}),
            actions=frozenset({Action.MANAGE}),
            until=NOW + timedelta(days=1),
        ),
        NOW,
        "op",
    )
}


def best_ms(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        began = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - began)
    return round(best * 1000, 3)


def refused(work: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        try:
            work()
        except DefinitionError:
            return
        raise AssertionError("a megabyte reference was accepted")

    return run


def decide(body: dict[str, Any]) -> bool:
    """The command processor's decision of a ``create``: True if accepted."""
    value = {
        "request_id": "r-1",
        "verb": "create",
        "principal": {"name": "me", "role": "user", "tenant_id": TENANT, "user_id": USER},
        "tenant_id": TENANT,
        "user_id": USER,
        "issued_at": NOW,
        "definition": json.dumps(body),
    }
    return apply(command_from_value(value, _RING), {}, GRANTS, NOW).result.ok


def main() -> None:
    baseline = best_ms(lambda: decide(BODY))
    assert decide(BODY), "the honest definition must be accepted"
    cases: dict[str, dict[str, float]] = {}
    for name, unit in SHAPES.items():
        field = (unit * (MEGABYTE // len(unit) + 1))[:MEGABYTE]
        body = {**BODY, "delivery": {"target": field}}
        assert not decide(body)
        cases[name] = {
            "checked_ref_ms": best_ms(refused(partial(checked_ref, field, "delivery.target"))),
            "definition_ms": best_ms(
                refused(partial(WatcherDefinition.from_json, body, tenant_id=TENANT, user_id=USER))
            ),
            "command_ms": best_ms(partial(decide, body)),
        }
    worst = max(max(case.values()) for case in cases.values())
    print(
        json.dumps(
            {
                "benchmark": "hostile",
                "python": platform.python_version(),
                "field_bytes": MEGABYTE,
                "baseline_accept_ms": round(baseline, 3),
                "cases": cases,
                "worst_refusal_ms": round(worst, 3),
                "ratio_worst_to_baseline": round(worst / baseline, 2),
                "goal_ms": GOAL_MS,
                "goal_met": worst < GOAL_MS,
            }
        )
    )


if __name__ == "__main__":
    main()
