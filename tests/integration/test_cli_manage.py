"""``vigil watch``, ``vigil grant`` and ``vigil erase`` end to end against
``vigil command-processor`` (a real subprocess on a real broker): output, one-line errors,
``--json``, confirmation, metrics, graceful SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.erase_cmd import erasure_reach
from pipeline.cli.group import vigil
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from tests.names import fresh

pytestmark = pytest.mark.integration

PARTITIONS = 2
ROOT = Path(__file__).resolve().parents[2]

DEFINITION_YAML = """\
watcher_id: release-build-failed
purpose: ops.alert
mode: every
source:
  kind: event
  source_id: ci.pipeline
  event_type: build.finished
  max_age: 10m
condition:
  all:
    - eq: [status, failed]
    - contains: [branch, release/]
delivery:
  target: ops-hook
  quiet_hours: {start: 22:00, end: 07:00, timezone: Europe/Berlin}
expires_at: 2027-06-01T00:00:00Z
"""


AGENT_WATCH_JSON = json.dumps(
    {
        "watcher_id": "aw-1",
        "purpose": "agent.watch",
        "mode": "once",
        "source": {
            "kind": "polling",
            "source_id": "run:r-1",
            "tool": "workflow.run.status@v1",
            "target": "r-1",
            "cadence": "5m",
            "max_age": "2m",
        },
        "condition": {"eq": ["status", "succeeded"]},
        "delivery": {"target": "in-app"},
        "window": "1h",
        "session_id": "s-1",
    }
)


@dataclass
class Daemon:
    config: Path
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def wait_for(self, pattern: str, seconds: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in list(self.lines):
                found = re.search(pattern, line)
                if found:
                    return found
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} from the processor: {self.lines}")


def vigil_cli(daemon: Daemon, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(vigil, ["--config", str(daemon.config), *args], input=stdin)


@pytest.fixture
def daemon(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Daemon]:
    prefix = fresh("t-cli") + "."
    ensure_topics(connect_admin(kafka_bootstrap), Topology(prefix, PARTITIONS))
    config = tmp_path / "vigil.toml"
    config.write_text(
        f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\ntopic_prefix = "{prefix}"\n'
        f"partitions = {PARTITIONS}\n\n"
        '[subject]\ntenant_id = "local"\nuser_id = "me"\n\n'
        '[operator]\nname = "ops"\n\n'
        '[metrics]\nlisten = "127.0.0.1:0"\n',
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipeline.cli.main",
            "--config",
            str(config),
            "command-processor",
            "--instance",
            "cli-test",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    found = Daemon(config, process)

    def collect() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            found.lines.append(line.rstrip())

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        found.wait_for(r"command processor .* running")
        yield found
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        reader.join(10)
        assert process.stderr is not None
        process.stderr.close()


def add_grant(daemon: Daemon, *sources: str, tenant: str = "local", user: str = "me") -> str:
    args = ["--as-operator", "grant", "add", "--tenant", tenant, "--user", user]
    args += ["--purpose", "ops.alert"]
    for source in sources:
        args += ["--source", source]
    args += ["--target", "ops-hook", "--actions", "evaluate,deliver,manage", "--until", "30d"]
    result = vigil_cli(daemon, *args)
    assert result.exit_code == 0, result.output + result.stderr
    grant_id = result.stdout.strip()
    assert re.fullmatch(r"g-[0-9a-f]{16}", grant_id)
    return grant_id


def test_grant_add_list_revoke_round_trip_through_the_processor(daemon: Daemon) -> None:
    grant_id = add_grant(daemon, "ci.pipeline")
    listed = vigil_cli(daemon, "--as-operator", "grant", "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    grants = json.loads(listed.stdout)["grants"]
    assert [(g["grant_id"], g["sources"], g["actions"]) for g in grants] == [
        (grant_id, ["ci.pipeline"], ["deliver", "evaluate", "manage"])
    ]
    plain = vigil_cli(daemon, "--as-operator", "grant", "list")
    assert grant_id in plain.stdout and "sources=ci.pipeline" in plain.stdout

    revoked = vigil_cli(daemon, "--as-operator", "grant", "revoke", "--id", grant_id)
    assert revoked.exit_code == 0 and f"revoked {grant_id}" in revoked.stdout
    assert json.loads(vigil_cli(daemon, "--as-operator", "grant", "list", "--json").stdout) == {
        "grants": []
    }
    again = vigil_cli(daemon, "--as-operator", "grant", "revoke", "--id", grant_id)
    assert again.exit_code == 1
    assert again.stderr.strip().splitlines()[-1].endswith("[not_found]")


def test_watch_create_from_yaml_then_show_list_pause_resume_cancel(daemon: Daemon) -> None:
    denied = vigil_cli(daemon, "watch", "create", "-f", "-", stdin=DEFINITION_YAML)
    assert denied.exit_code == 1 and "[denied]" in denied.stderr
    add_grant(daemon, "ci.pipeline")
    created = vigil_cli(daemon, "watch", "create", "-f", "-", stdin=DEFINITION_YAML)
    assert created.exit_code == 0, created.stderr
    assert created.stdout.strip() == "created release-build-failed: active (version 1, revision 1)"

    shown = vigil_cli(daemon, "watch", "show", "release-build-failed", "--json")
    view = json.loads(shown.stdout)
    assert (view["status"], view["tenant_id"], view["user_id"]) == ("active", "local", "me")
    assert view["definition"]["delivery"]["quiet_hours"]["start"] == "22:00"

    listed = vigil_cli(daemon, "watch", "list")
    assert listed.stdout.splitlines()[0].split() == [
        "WATCHER_ID",
        "STATUS",
        "VERSION",
        "REVISION",
        "SOURCE_ID",
    ]
    assert listed.stdout.splitlines()[1].split() == [
        "release-build-failed",
        "active",
        "1",
        "1",
        "ci.pipeline",
    ]
    stale = vigil_cli(daemon, "watch", "pause", "release-build-failed", "--revision", "7")
    assert stale.exit_code == 1
    assert stale.stderr.strip() == (
        "Error: expected_revision: watcher 'release-build-failed' is at revision 1, not 7 "
        "[stale_revision]"
    )
    for verb, status in (("pause", "paused"), ("resume", "active"), ("cancel", "cancelled")):
        moved = vigil_cli(daemon, "watch", verb, "release-build-failed")
        assert moved.exit_code == 0, moved.stderr
        assert f": {status} " in moved.stdout
    assert vigil_cli(daemon, "watch", "list").stdout.strip() == "no watchers"
    closed = json.loads(vigil_cli(daemon, "watch", "list", "--state", "cancelled", "--json").stdout)
    assert [w["watcher_id"] for w in closed["watchers"]] == ["release-build-failed"]


def test_watch_errors_print_one_line_and_exit_nonzero(daemon: Daemon, tmp_path: Path) -> None:
    add_grant(daemon, "ci.pipeline")
    path = tmp_path / "w.yaml"
    path.write_text(DEFINITION_YAML, encoding="utf-8")
    assert vigil_cli(daemon, "watch", "create", "-f", str(path)).exit_code == 0

    conflict = vigil_cli(daemon, "watch", "create", "-f", str(path))
    assert conflict.exit_code == 1
    assert conflict.stderr.strip() == (
        "Error: watcher_id: watcher 'release-build-failed' exists and is active [conflict]"
    )
    as_json = vigil_cli(daemon, "watch", "create", "-f", str(path), "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "conflict"

    stale = vigil_cli(daemon, "watch", "update", "-f", str(path), "--revision", "5")
    assert stale.exit_code == 1 and stale.stderr.strip().endswith("[stale_revision]")
    updated = vigil_cli(daemon, "watch", "update", "-f", str(path), "--revision", "1")
    assert updated.stdout.strip() == "updated release-build-failed: active (version 2, revision 2)"

    bad = DEFINITION_YAML.replace("max_age: 10m", "max_age: soon")
    invalid = vigil_cli(daemon, "watch", "create", "-f", "-", stdin=bad.replace("release-", "x-"))
    assert invalid.exit_code == 1  # refused here, before anything is sent
    lines = invalid.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("<stdin>:8:12: source.max_age: not a duration")
    missing = vigil_cli(daemon, "watch", "show", "nope")
    assert missing.exit_code == 1 and missing.stderr.strip().endswith("[not_found]")


def test_options_after_the_subcommand_and_completion_of_live_watcher_ids(
    daemon: Daemon,
) -> None:
    add_grant(daemon, "ci.pipeline")
    created = CliRunner().invoke(
        vigil,
        ["watch", "create", "-f", "-", "--timeout", "20", "--config", str(daemon.config)],
        input=DEFINITION_YAML,
    )
    assert created.exit_code == 0, created.stderr
    shown = CliRunner().invoke(
        vigil,
        ["watch", "show", "release-build-failed", "--subject", "local/me", "--json"],
        env={"VIGIL_CONFIG": str(daemon.config)},
    )
    assert json.loads(shown.stdout)["watcher_id"] == "release-build-failed"
    completed = subprocess.run(
        [sys.executable, "-m", "pipeline.cli.main"],
        env={
            **os.environ,
            "_VIGIL_COMPLETE": "bash_complete",
            "COMP_WORDS": f"vigil --config {daemon.config} watch show rel",
            "COMP_CWORD": "5",
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.stdout.split() == ["plain,release-build-failed"]


def test_operator_acts_for_another_subject_and_sigterm_stops_the_processor_cleanly(
    daemon: Daemon,
) -> None:
    add_grant(daemon, "ci.pipeline", tenant="acme", user="u-42")
    subject = ("--tenant", "acme", "--user", "u-42")
    as_user = vigil_cli(daemon, "watch", "create", "-f", "-", *subject, stdin=DEFINITION_YAML)
    assert as_user.exit_code == 2 and "--as-operator" in as_user.output
    created = vigil_cli(
        daemon, "--as-operator", "watch", "create", "-f", "-", *subject, stdin=DEFINITION_YAML
    )
    assert created.exit_code == 0, created.stderr
    theirs = json.loads(
        vigil_cli(daemon, "--as-operator", "watch", "list", *subject, "--json").stdout
    )
    assert [(w["tenant_id"], w["user_id"]) for w in theirs["watchers"]] == [("acme", "u-42")]
    mine = vigil_cli(daemon, "watch", "list", "--json")  # local/me holds no grant: fail-closed
    assert mine.exit_code == 1 and json.loads(mine.stdout)["error"]["code"] == "denied"

    grant = vigil_cli(
        daemon,
        "--as-operator",
        "grant",
        "add",
        "--tenant",
        "acme",
        "--user",
        "u-42",
        "--purpose",
        "agent.watch",
        "--source",
        "run:r-1",
        "--tool",
        "workflow.run.status@v1",
        "--target",
        "in-app",
        "--actions",
        "propose,approve",
        "--until",
        "2099-01-01T00:00:00Z",
    )
    assert grant.exit_code == 0, grant.stderr
    op = "--as-operator"
    proposed = vigil_cli(
        daemon, op, "watch", "propose", "-f", "-", *subject, stdin=AGENT_WATCH_JSON
    )
    assert proposed.stdout.strip() == "proposed aw-1: proposed (version 1, revision 1)"
    twin = AGENT_WATCH_JSON.replace('"aw-1"', '"aw-2"')
    collapsed = vigil_cli(daemon, op, "watch", "propose", "-f", "-", *subject, stdin=twin)
    assert collapsed.stdout.strip().startswith("already proposed as aw-1: proposed")
    approved = vigil_cli(daemon, op, "watch", "approve", "aw-1", *subject)
    assert approved.stdout.strip() == "approved aw-1: active (version 1, revision 2)"

    port = int(daemon.wait_for(r"metrics and health on http://127.0.0.1:(\d+)").group(1))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'vigil_commands_total{result="ok",verb="create"} 1.0' in body
    assert 'vigil_commands_total{result="ok",verb="grant_add"} 2.0' in body
    assert 'vigil_commands_total{result="ok",verb="propose"} 2.0' in body

    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.process.wait(30) == 0
    daemon.wait_for(r"command processor stopped")


def test_erase_asks_first_then_forgets_every_watcher_of_the_subject(daemon: Daemon) -> None:
    subject = ("--tenant", "acme", "--user", "u-42")
    op = "--as-operator"
    add_grant(daemon, "ci.pipeline", tenant="acme", user="u-42")
    created = vigil_cli(daemon, op, "watch", "create", "-f", "-", *subject, stdin=DEFINITION_YAML)
    assert created.exit_code == 0, created.stderr

    declined = vigil_cli(daemon, op, "erase", *subject, stdin="n\n")
    assert declined.exit_code == 1
    assert "Erase every watcher of tenant 'acme' user 'u-42'?" in declined.stderr
    kept = json.loads(vigil_cli(daemon, op, "watch", "list", *subject, "--json").stdout)
    assert [w["watcher_id"] for w in kept["watchers"]] == ["release-build-failed"]

    erased = vigil_cli(daemon, op, "erase", *subject, stdin="y\n")
    assert erased.exit_code == 0, erased.stderr
    lines = erased.stdout.splitlines()
    assert lines[:2] == [
        "erased acme/u-42: 1 watcher, 2 data keys shredded, 1 grant revoked",
        "  release-build-failed",
    ]
    assert "not reached (copies outside Kafka):" in lines
    assert lines[-1].startswith("ciphertext remains at most 91d (definition-log retention)")
    gone = vigil_cli(daemon, op, "watch", "show", "release-build-failed", *subject)
    assert gone.exit_code == 1 and gone.stderr.strip().endswith("[not_found]")

    # Its grants went with it: erasing again is refused until an operator grants again
    # (seed 000: only an authorized erasure), and then erases nothing.
    again = vigil_cli(daemon, op, "erase", *subject, "--yes", "--json")
    assert again.exit_code == 1 and json.loads(again.stdout)["error"]["code"] == "denied"
    add_grant(daemon, "ci.pipeline", tenant="acme", user="u-42")
    again = vigil_cli(daemon, op, "erase", *subject, "--yes", "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout) == {
        "tenant_id": "acme",
        "user_id": "u-42",
        "erased": 0,
        "watcher_ids": [],
        "grants_revoked": 1,
        **erasure_reach(),
    }
