"""One listener per process for ``/metrics``, ``/healthz`` and ``/readyz`` (DESIGN.md §6).

Owns :class:`HealthServer` (its docstring says what each probe answers), :class:`Check`,
:func:`listen_address` (each process its own default port) and :func:`address_file` (where a process
writes its address so ``vigil doctor`` finds it). Leaves out what the stages count (their
``metrics`` modules) and the HTTP API's own probes."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    generate_latest,
)

from pipeline.kafka.admin import connect_admin
from pipeline.kafka.lag import group_lag
from pipeline.rules.errors import VigilError
from pipeline.rules.native import path_name
from pipeline.runtime.metrics import per_registry

__all__ = [
    "DEFAULT_MAX_LAG",
    "PROCESS_PORT_OFFSETS",
    "Check",
    "HealthServer",
    "address_file",
    "listen_address",
    "state_dir",
]

log = logging.getLogger(__name__)

# Each process's port: the port of [metrics] listen plus its offset (9464 + 1 = the evaluator).
PROCESS_PORT_OFFSETS: Final = {
    "command-processor": 0,
    "evaluator": 1,
    "ticker": 2,
    "delivery": 3,
    "daemon": 4,
    "api": 5,
}
DEFAULT_MAX_LAG: Final = 1_000
_LAG_EVERY_S: Final = 10.0

Check = Callable[[], str | None]  # None: passes; else the problem, one line


def listen_address(listen: str, process: str, override: int | None = None) -> tuple[str, int]:
    """``(host, port)`` of ``process``: ``override`` when configured, else the port of
    ``listen`` plus the process's offset; a port of 0 stays 0 (a free one is picked)."""
    host, _, port_text = listen.rpartition(":")
    port = int(port_text)
    if override is not None:
        return host.strip("[]"), override
    return host.strip("[]"), port + PROCESS_PORT_OFFSETS.get(process, 0) if port else 0


def state_dir(environ: Mapping[str, str] | None = None, configured: Path | None = None) -> Path:
    """``configured`` (``[instance] state_dir``), else ``$VIGIL_STATE``, else
    ``$XDG_STATE_HOME/vigil``, else ``~/.local/state/vigil``."""
    if configured is not None:
        return configured
    env = os.environ if environ is None else environ
    if env.get("VIGIL_STATE"):
        return Path(env["VIGIL_STATE"])
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "vigil"


def address_file(state: Path, namespace: str, process: str, instance: str) -> Path:
    """Where a process writes the URL of its listener: ``<state>/run/<ns>.<process>.<id>.url``."""
    return state / "run" / f"{namespace}.{process}.{instance}.url"


@dataclass(slots=True)
class _Cached:
    check: Check
    problem: str | None = "starting"
    at: float = float("-inf")


@dataclass(slots=True)
class _Group:
    group: str
    partitions: tuple[tuple[str, int], ...]
    lag: dict[tuple[str, int], int] | None = None
    error: str | None = None


class HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one listener, in a daemon thread.

    ``/metrics`` is Prometheus's text format; ``/healthz`` answers 200 while the process runs;
    ``/readyz`` answers 200 ``{"status": "ready"}`` when every registered :class:`Check` passes,
    else 503 with each failing check's problem (for a stream process: broker and Redis answer, the
    member is ``assigned``, its lag is at most ``max_lag``), ``starting`` before the first run.
    ``/readyz`` and ``vigil_hot_path_info`` name the hot path (``pipeline.rules.native``). Checks
    run in a background thread every ``ttl_s``, so a probe never waits; another thread measures
    every registered group's lag (``vigil_consumer_group_lag``)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        metrics_registry: CollectorRegistry = REGISTRY,
        ttl_s: float = 2.0,
        max_lag: int = DEFAULT_MAX_LAG,
        bootstrap: str | None = None,
    ) -> None:
        self._metrics_registry = metrics_registry
        self._ttl = ttl_s
        self._max_lag = max_lag
        self._checks: dict[str, _Cached] = {}
        self._groups: list[_Group] = []
        self._lock = threading.Lock()
        self._bootstrap = bootstrap
        self._stop = threading.Event()
        self._lag = _lag_gauge(metrics_registry)
        _hot_path_gauge(metrics_registry).labels(path_name()).set(1)
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._threads = [
            threading.Thread(target=self._serve, name="health", daemon=True),
            threading.Thread(target=self._check, name="readiness", daemon=True),
        ]

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"

    def add(self, name: str, check: Check) -> None:
        """A readiness check, shown by ``name`` in ``/readyz``."""
        with self._lock:
            self._checks[name] = _Cached(check)

    def remove(self, name: str) -> None:
        """Drop a readiness check (a placeholder the process has replaced with real ones)."""
        with self._lock:
            self._checks.pop(name, None)

    def watch_group(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Measure ``group``'s lag over ``partitions`` and add its ``caught_up`` check."""
        entry = _Group(group, tuple(sorted(set(partitions))))
        with self._lock:
            self._groups.append(entry)
        self.add(f"caught_up:{group}", lambda: self._caught_up(entry))

    def start(self) -> HealthServer:
        if self._bootstrap is not None:
            self._threads.append(threading.Thread(target=self._measure, name="lag", daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def _serve(self) -> None:
        self._server.serve_forever(poll_interval=0.1)  # close() returns within 0.1 s

    def close(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    # -- readiness ------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, dict[str, str]]:
        """Whether every check passed on its last run, and each check's state (``ok`` or its
        problem). Never waits on a check: they run in the background."""
        with self._lock:
            states = {name: cached.problem or "ok" for name, cached in self._checks.items()}
        return bool(states) and all(s == "ok" for s in states.values()), states

    def _check(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                checks = list(self._checks.values())
            for cached in checks:
                cached.problem = _run(cached.check)
                cached.at = time.monotonic()
            self._stop.wait(self._ttl)

    def _caught_up(self, entry: _Group) -> str | None:
        if entry.error is not None:
            return entry.error
        if entry.lag is None:
            return "starting: lag not measured yet"
        behind = sum(entry.lag.values())
        return None if behind <= self._max_lag else f"{behind} records behind"

    def _measure(self) -> None:
        assert self._bootstrap is not None
        admin = connect_admin(self._bootstrap)
        while not self._stop.is_set():
            with self._lock:
                groups = list(self._groups)
            for entry in groups:
                try:
                    entry.lag = group_lag(admin, entry.group, entry.partitions)
                    entry.error = None
                except VigilError as exc:
                    entry.error = f"lag unknown: {exc}"
                    continue
                except FutureTimeout:  # the admin client never answered: measure again later
                    entry.error = "lag unknown: the broker did not answer in time"
                    admin = connect_admin(self._bootstrap)
                    continue
                for (topic, partition), lag in entry.lag.items():
                    self._lag.labels(entry.group, topic, str(partition)).set(lag)
            self._stop.wait(_LAG_EVERY_S if groups else 0.5)

    # -- serving --------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # probes every few seconds are not news

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(server._metrics_registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._json(200, {"status": "alive"})
                elif path == "/readyz":
                    ready, checks = server.readiness()
                    status = "ready" if ready else _overall(checks)
                    body = {"status": status, "checks": checks, "hot_path": path_name()}
                    self._json(200 if ready else 503, body)
                else:
                    self._json(404, {"error": {"code": "not_found", "message": path[:100]}})

            def _json(self, status: int, body: dict[str, Any]) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def _overall(checks: Mapping[str, str]) -> str:
    return "starting" if any(p.startswith("starting") for p in checks.values()) else "not_ready"


def _run(check: Check) -> str | None:
    try:
        return check()
    except Exception as exc:  # a check that fails is a failing check, never a 500
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _create_lag_gauge(metrics_registry: CollectorRegistry) -> Gauge:
    return Gauge(
        "vigil_consumer_group_lag",
        "Records between a consumer group's committed offset and the partition's end "
        "(read committed), measured from the group coordinator every 10 s.",
        ["group", "topic", "partition"],
        registry=metrics_registry,
    )


_lag_gauge = per_registry(_create_lag_gauge)


def _create_hot_path_gauge(metrics_registry: CollectorRegistry) -> Gauge:
    return Gauge(
        "vigil_hot_path_info",
        "1 for the hot path this process runs: native (vigil_native) or python.",
        ["path"],
        registry=metrics_registry,
    )


_hot_path_gauge = per_registry(_create_hot_path_gauge)
