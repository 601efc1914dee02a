"""Memory of what commands create: 10^4 proposals from one agent session stay flat.

``python -m benchmarks.limits`` prints one JSON object. One agent session floods the command
processor's pure decision (:func:`pipeline.rules.commands.apply`) with 10,000 distinct proposals and
the registry view is kept exactly as the processor keeps it (each outcome's registry writes
applied). Two runs with the default limits (DESIGN.md §10): a *burst* (all within an hour: past 100
pending proposals every new one is ``cap_reached``) and a *trickle*, one every 20 minutes for 139
days (proposals expire after 24 h and are forgotten). Memory held (``tracemalloc``, after a
collection) is taken at 10^3 and 10^4 proposals, with pydantic-core's global JSON string cache
(bounded, about 1 MB when full) off for the definition model, so what is measured is what the limits
bound. Flat means the ratio stays near 1. The baseline, in the same run, is the same flood with the
limits lifted (a cap of 10^9, a 30-day life): its memory grows with every proposal (measured at 500
and 1,000 — it is quadratic in time, so it stays short). A run takes about a minute.
"""

from __future__ import annotations

import gc
import json
import platform
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.rules.authz import Action, Grant, Principal, Role
from pipeline.rules.commands import Command, CommandVerb, GrantRecord, RegistryEntry, apply
from pipeline.rules.commands.limits import DEFAULT_LIMITS, Limits
from pipeline.rules.definition import WatcherDefinition

__all__ = ["main"]

T, U, SESSION = "acme", "u-1", "s-flood"
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
AGENT = Principal(name="agent:flood", role=Role.AGENT, tenant_id=T, user_id=U, session_id=SESSION)
GRANTS = {
    "g-1": GrantRecord(
        Grant(
            grant_id="g-1",
            tenant_id=T,
            user_id=U,
            purpose="agent.watch",
            sources=frozenset({"run:r-1"}),
            tools=frozenset({"workflow.run.status@v1"}),
            targets=frozenset({"in-app"}),
            actions=frozenset({Action.PROPOSE}),
            until=START + timedelta(days=3650),
        ),
        START,
        "bench",
    )
}
UNLIMITED = Limits(
    watchers=10**9, proposals=10**9, proposal_ttl=timedelta(days=30), schedules=10**9
)


def proposal(n: int) -> dict[str, Any]:
    """A distinct proposal (no collapse) without an id: the processor generates one."""
    return {
        "purpose": "agent.watch",
        "source": {
            "kind": "polling",
            "source_id": "run:r-1",
            "tool": "workflow.run.status@v1",
            "target": "r-1",
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", f"state-{n}"]},
        "delivery": {"target": "in-app"},
        "window": "1h",
    }


def _without_string_cache() -> None:
    """Rebuild the definition model without pydantic-core's global JSON string cache (bounded,
    about 1 MB when full, and shared by every model), so that what a run measures is what the
    command processor holds, not that cache filling up."""
    WatcherDefinition.model_config["cache_strings"] = False
    WatcherDefinition.model_rebuild(force=True)


def _held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def flood(count: int, step: timedelta, limits: Limits, marks: tuple[int, ...]) -> dict[str, Any]:
    """``count`` proposals ``step`` apart; memory held after each of ``marks`` proposals."""
    view: dict[str, RegistryEntry] = {}
    codes: dict[str, int] = {}
    held: dict[int, int] = {}
    largest = 0
    tracemalloc.start()
    base = _held()
    began = time.perf_counter()
    for n in range(1, count + 1):
        now = START + step * n
        command = Command(
            request_id=f"flood-{n}",
            verb=CommandVerb.PROPOSE,
            principal=AGENT,
            tenant_id=T,
            user_id=U,
            issued_at=now,
            definition=proposal(n),
        )
        outcome = apply(command, view, GRANTS, now, limits)
        for watcher_id, entry in outcome.registry:
            if entry is None:
                view.pop(watcher_id, None)
            else:
                view[watcher_id] = entry
        error = outcome.result.error
        code = "ok" if error is None else error.code.value
        codes[code] = codes.get(code, 0) + 1
        largest = max(largest, len(view))
        if n in marks:
            held[n] = _held() - base
    elapsed = time.perf_counter() - began
    tracemalloc.stop()
    first, last = marks[0], marks[-1]
    return {
        "proposals": count,
        "results": codes,
        "registry_entries_max": largest,
        "registry_entries_end": len(view),
        "held_bytes": {str(k): v for k, v in held.items()},
        "growth_ratio": round(held[last] / held[first], 2),
        "commands_per_s": round(count / elapsed),
    }


def main() -> None:
    _without_string_cache()
    burst = flood(10_000, timedelta(seconds=0.3), DEFAULT_LIMITS, (1_000, 10_000))
    trickle = flood(10_000, timedelta(minutes=20), DEFAULT_LIMITS, (1_000, 10_000))
    baseline = flood(1_000, timedelta(seconds=0.3), UNLIMITED, (500, 1_000))
    print(
        json.dumps(
            {
                "benchmark": "limits",
                "python": platform.python_version(),
                "burst_with_limits": burst,
                "trickle_with_limits": trickle,
                "baseline_without_limits": baseline,
                "flat": burst["growth_ratio"] < 1.5 and trickle["growth_ratio"] < 1.5,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
