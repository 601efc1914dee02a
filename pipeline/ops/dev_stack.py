"""What ``vigil dev`` runs: its servers, its configuration, its processes and its demo.

Owns :func:`write_config` (one ``vigil.toml`` plus one per process; a generated key-encryption key
file unless ``$VIGIL_MASTER_KEYS`` is set), :func:`services`, :func:`not_ready` (who is not ready
yet, and why) and :class:`Demo` (grants, an event watcher, a schedule, events). Leaves out ports and
servers (``dev_servers``), supervision (``supervisor``) and the terminal
(``pipeline.cli.dev_cmd``)."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from pipeline.crypto import generate_kek_text
from pipeline.ops.dev_servers import (
    BROKERS,
    METRIC_PROCESSES,
    DevPorts,
    Servers,
    default_broker,
    port_free,
)
from pipeline.ops.doctor import Status, process_ready
from pipeline.ops.health import address_file
from pipeline.ops.supervisor import Service
from pipeline.rules.errors import ConfigError
from pipeline.rules.namespace import DEFAULT_NAMESPACE

__all__ = [
    "BROKERS",
    "DEMO_SOURCE",
    "DEMO_WATCHER",
    "NAMESPACE",
    "Demo",
    "DevPorts",
    "Servers",
    "addresses",
    "default_broker",
    "dev_master_keys",
    "metric_total",
    "new_token",
    "not_ready",
    "port_free",
    "services",
    "write_config",
]

VIGIL: Final = (sys.executable, "-m", "pipeline.cli.main")
PROCESSES: Final = (*METRIC_PROCESSES, "daemon", "api")
NAMESPACE: Final = DEFAULT_NAMESPACE  # what topic_prefix "vigil." names
INSTANCE: Final = "dev"
DEMO_SOURCE: Final = "demo.builds"
DEMO_TYPE: Final = "build.finished"
DEMO_WATCHER: Final = "demo-build-failed"
_PURPOSE: Final = "demo.alert"


def dev_master_keys(state: Path) -> Path:
    """``state/master.keys``: the dev stack's key-encryption key, made once (mode 0600). Losing
    it makes everything the dev stack sealed unreadable, as erasure would."""
    path = state / "master.keys"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(generate_kek_text("dev") + "\n")
    return path


def write_config(state: Path, ports: DevPorts, token: str, partitions: int) -> Path:
    """``state/vigil.toml`` and one ``state/conf/<process>.toml`` per process."""
    keys = dev_master_keys(state)
    base = (
        f'[kafka]\nbootstrap_servers = "{ports.bootstrap}"\ntopic_prefix = "vigil."\n'
        f"partitions = {partitions}\nreplication_factor = {replication(ports.brokers)}\n"
        # KIP-848 where the broker serves it (Kafka 4.x), classic + range on Tansu.
        'group_protocol = "auto"\n\n'
        f'[redis]\nurl = "redis://127.0.0.1:{ports.redis}/0"\n\n'
        f'[subject]\ntenant_id = "local"\nuser_id = "me"\ntimezone = "UTC"\n\n'
        f'[operator]\nname = "dev"\n\n'
        f'[destinations.demo-log]\nkind = "log"\n\n'
        f'[chats.me]\nkind = "console"\n\n'
        f'[rpc]\nsocket_path = "{state / "run" / "vigil.sock"}"\n\n'
        f'[run]\nallow_dir = "{state / "scripts"}"\n\n'
        # An agent added to a dev stack runs as you: the one mode that allows it unasked.
        "[agent]\nallow_same_uid = true\n\n"
        f'[api]\nlisten = "127.0.0.1:{ports.api}"\n\n'
        f'[instance]\nid = "{INSTANCE}"\nstate_dir = "{state}"\n\n'
        f'[privacy]\nmaster_key_file = "{keys}"\n\n'
        f'[principals.dev]\ntoken_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
        f'role = "user"\ntenant_id = "local"\nuser_id = "me"\n\n'
    )
    (state / "run").mkdir(parents=True, exist_ok=True, mode=0o700)
    (state / "scripts").mkdir(parents=True, exist_ok=True)
    (state / "conf").mkdir(parents=True, exist_ok=True)
    main = state / "vigil.toml"
    chosen = "".join(f'"{name}" = {port}\n' for name, port in ports.metrics.items())
    metrics = f'[metrics]\nlisten = "127.0.0.1:0"\n\n[metrics.ports]\n{chosen}'
    main.write_text(base + metrics, encoding="utf-8")
    for name in PROCESSES:
        (state / "conf" / f"{name}.toml").write_text(base + metrics, encoding="utf-8")
    return main


def replication(brokers: int) -> int:
    """The replication factor of a dev stack's topics on ``brokers`` brokers (3 at most)."""
    return min(3, brokers)


def addresses(state: Path) -> dict[str, Path]:
    """Where each process writes the URL of its ``/readyz`` (see ``pipeline.ops.health``)."""
    return {name: address_file(state, NAMESPACE, name, INSTANCE) for name in PROCESSES}


def not_ready(state: Path) -> list[str]:
    """Each process not ready yet, with its failing checks (what ``vigil doctor`` says)."""
    waiting = []
    for name, where in addresses(state).items():
        if not where.exists():
            waiting.append(f"{name}: starting")
            continue
        finding = process_ready(where, NAMESPACE)
        if finding.status is not Status.PASS:
            waiting.append(f"{name}: {finding.detail}")
    return waiting


def services(state: Path, env: dict[str, str]) -> list[Service]:
    """The supervised group: each process reads its own config file."""
    out = []
    for name in PROCESSES:
        argv: list[str] = [*VIGIL, "--config", str(state / "conf" / f"{name}.toml"), name]
        if name == "delivery":
            argv += ["--senders", "4"]
        out.append(Service(name, argv, env, state / "logs" / f"{name}.log", cwd=state))
    return out


def metric_total(port: int, name: str, match: str = "") -> float | None:
    """The sum of a metric's samples on ``127.0.0.1:port/metrics`` (None: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {") and match in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class Demo:
    """Grants, a watcher, a schedule and a stream of events for the local subject."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self._env = {**env, "VIGIL_CONFIG": str(config)}
        self._log = log
        self._sent = 0

    def _vigil(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [*VIGIL, *args],
            env=self._env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        with self._log.open("a", encoding="utf-8") as log:
            log.write(f"$ vigil {' '.join(args)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            raise ConfigError(f"vigil {args[0]} {args[1] if len(args) > 1 else ''} failed: "
                              f"{(done.stderr or done.stdout).strip()[-300:]}")  # fmt: skip
        return done.stdout

    def _retry(self, *args: str, stdin: str | None = None, timeout_s: float = 120) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._vigil(*args, stdin=stdin)
            except (ConfigError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def load(self) -> None:
        """The grant and the watcher; then a schedule through the daemon; then events."""
        self._retry(
            "--as-operator", "grant", "add", "--tenant", "local", "--user", "me",
            "--purpose", _PURPOSE,
            "--source", DEMO_SOURCE, "--target", "demo-log",
            "--actions", "evaluate,deliver,manage", "--until", "30d",
        )  # fmt: skip
        watcher = {
            "watcher_id": DEMO_WATCHER,
            "purpose": _PURPOSE,
            "source": {
                "kind": "event",
                "source_id": DEMO_SOURCE,
                "event_type": DEMO_TYPE,
                "max_age": "10m",
            },
            "condition": {"eq": ["status", "failed"]},
            "delivery": {"target": "demo-log", "verb": "notify"},
            "expires_at": "2099-01-01T00:00:00Z",
            "privacy": {"retain_paths": ["status", "branch"]},
        }
        if not self._exists():  # a second run on the same state dir keeps its watcher
            self._retry("watch", "create", "-f", "-", stdin=json.dumps(watcher))
        self._retry(
            "schedule", "--in", "20s", "--name", "demo", "--update", "--",
            "send", "hello from vigil dev: the demo schedule fired",
        )  # fmt: skip
        for _ in range(3):
            self.publish()

    def _exists(self) -> bool:
        try:
            self._vigil("watch", "show", DEMO_WATCHER)
        except ConfigError:
            return False
        return True

    def publish(self) -> None:
        """One demo event; every other one is a failed build (a notification)."""
        n = self._sent
        self._sent += 1
        stamp = datetime.now(UTC)
        event = {
            "source_id": DEMO_SOURCE,
            "event_type": DEMO_TYPE,
            "event_id": f"demo-{stamp:%Y%m%dT%H%M%S}-{n}",
            "observed_at": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "payload": {"status": "failed" if n % 2 == 0 else "passed", "branch": "main"},
        }
        self._vigil("publish", stdin=json.dumps(event) + "\n")


def new_token() -> str:
    return "vigil-dev-" + secrets.token_urlsafe(18)
