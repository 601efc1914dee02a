"""``vigil explain``: a watcher's evaluations in time order with reasons and delivery state, from
the real command processor, evaluator and delivery processes on the real broker and Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import pytest

from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from tests.names import fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

VIGIL: Final = [sys.executable, "-m", "pipeline.cli.main"]
SOURCE, TYPE, WATCHER = "ci.pipeline", "build.finished", "release-build-failed"


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.fixture
def stack(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    prefix = fresh("t-explain")
    ensure_topics(connect_admin(kafka_bootstrap), Topology(f"{prefix}.", 2, 1))
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{prefix}."\n'
        f"partitions = 2\nreplication_factor = 1\n\n"
        f'[redis]\nurl = "{redis_url}"\n\n'
        f'[subject]\ntenant_id = "ex"\nuser_id = "{prefix}"\ntimezone = "UTC"\n\n'
        f'[destinations.ops-hook]\nkind = "log"\n\n[instance]\nid = "{prefix}"\n\n'
        '[operator]\nname = "ops"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "VIGIL_CONFIG": str(config), "PYTHONUNBUFFERED": "1"}
    procs = []
    for name, extra in (
        ("command-processor", []),
        ("evaluator", []),
        ("delivery", ["--group", f"{prefix}.delivery"]),
    ):
        log = (tmp_path / f"{name}.log").open("ab")
        procs.append(
            subprocess.Popen(
                [*VIGIL, name, "--no-metrics", *extra], env=env, stdout=log, stderr=log
            )
        )
        log.close()
    yield env
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(60)


def _vigil(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [*VIGIL, *args], env=env, input=stdin, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_explain_lists_evaluations_in_order_with_reasons_digests_and_delivery_state(
    stack: dict[str, str],
) -> None:
    env = stack
    _vigil(
        env, "--as-operator", "grant", "add", "--tenant", "ex", "--user", _user(env),
        "--purpose", "ops.alert",
        "--source", SOURCE, "--target", "ops-hook", "--actions", "evaluate,deliver,manage",
        "--until", "1d",
    )  # fmt: skip
    body = {
        "watcher_id": WATCHER,
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": SOURCE, "event_type": TYPE, "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "ops-hook", "verb": "notify"},
        "expires_at": "2030-01-01T00:00:00Z",
    }
    _vigil(env, "watch", "create", "-f", "-", stdin=json.dumps(body))
    now = datetime.now(UTC)
    events = [
        ("b-1", {"status": "passed"}, now),
        ("b-2", {"status": "failed"}, now - timedelta(hours=2)),  # stale
        ("b-3", {"status": "failed"}, now),
    ]
    lines = "".join(
        json.dumps(
            {
                "source_id": SOURCE,
                "event_type": TYPE,
                "event_id": event_id,
                "observed_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "payload": payload,
            }
        )
        + "\n"
        for event_id, payload, at in events
    )
    _vigil(env, "publish", stdin=lines)

    def delivered() -> list[dict[str, Any]] | None:
        rows: list[dict[str, Any]] = json.loads(_vigil(env, "explain", WATCHER, "--json"))
        done = len(rows) == 3 and (rows[2]["delivery"] or {}).get("status") == "delivered"
        return rows if done else None

    rows = _wait(delivered, 120, "three evaluations and a delivered notification")
    assert [r["trigger"]["event_id"] for r in rows] == ["b-1", "b-2", "b-3"]
    assert [r["reason"] for r in rows] == ["condition_false", "stale", "condition_true"]
    assert [r["outcome"] for r in rows] == ["pending", "unavailable", "satisfied"]
    assert [r["delivery"] for r in rows[:2]] == [None, None]
    assert rows[2]["delivery_key"] is not None and rows[2]["delivery"]["attempt"] == 1
    assert all(len(r["evidence_digest"]) == 64 for r in rows)
    text = _vigil(env, "explain", WATCHER)
    assert text.count("\n") == 3 and "delivery=delivered" in text


def _user(env: dict[str, str]) -> str:
    text = Path(env["VIGIL_CONFIG"]).read_text(encoding="utf-8")
    return text.split('user_id = "', 1)[1].split('"', 1)[0]
