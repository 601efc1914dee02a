"""The ports and servers of ``vigil dev``: a broker (or a KRaft cluster) and Redis of its own.

Owns :class:`DevPorts` (defaults when free, else free ones; a cluster on consecutive ports) and
:class:`Servers` (the broker through ``deploy/kafka/kafka.sh``, Apache Kafka with Java, else Tansu,
and Redis through ``deploy/redis/redis.sh``; data in the state directory, stopped by the same
scripts). Leaves out configuration, processes and demo (``pipeline.ops.dev_stack``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pipeline.rules.errors import ConfigError

__all__ = [
    "BROKERS",
    "METRIC_PROCESSES",
    "ROOT",
    "DevPorts",
    "Servers",
    "default_broker",
    "port_free",
]

ROOT: Final = Path(__file__).resolve().parents[2]
METRIC_PROCESSES: Final = ("command-processor", "evaluator", "ticker", "delivery")


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 now (a port in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _any_free() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pick(wanted: int | None, default: int, taken: set[int]) -> int:
    """``wanted`` as given; else the default when it is free; else any free port."""
    if wanted:
        port = wanted
    elif default and default not in taken and port_free(default):
        port = default
    else:
        port = _any_free()
        while port in taken:
            port = _any_free()
    taken.add(port)
    return port


def _pick_run(wanted: int | None, default: int, count: int, taken: set[int]) -> int:
    """The first of ``count`` consecutive ports: ``wanted`` as given; else from ``default`` up,
    the first run that is all free."""
    if wanted:
        first = wanted
    else:
        first = default
        while any(p in taken or not port_free(p) for p in range(first, first + count)):
            first += count
    taken.update(range(first, first + count))
    return first


@dataclass(frozen=True, slots=True)
class DevPorts:
    """The stack's ports. With ``brokers`` > 1, broker *i* of the cluster listens on
    ``kafka + 2(i-1)`` and its controller on the next port (``kafka.sh cluster-start``)."""

    kafka: int
    controller: int
    redis: int
    api: int
    metrics: dict[str, int]
    brokers: int = 1

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka + 2 * i}" for i in range(self.brokers))

    @classmethod
    def choose(
        cls, kafka: int | None = None, redis: int | None = None, brokers: int = 1
    ) -> DevPorts:
        taken: set[int] = set()
        if brokers > 1:
            first = _pick_run(kafka, 9192, 2 * brokers, taken)
            r = _pick(redis, 6379, taken)
            a = _pick(None, 0, taken)
            metrics = {name: _pick(None, 0, taken) for name in METRIC_PROCESSES}
            return cls(first, first + 1, r, a, metrics, brokers)
        k = _pick(kafka, 9092, taken)
        # A stack on the usual broker port takes the usual ports when free; any other (a second
        # stack, one whose ports were chosen) takes free ones for everything, so two stacks
        # started at once never both find 9464 free and then fight over it.
        usual = k == 9092
        c = _pick(None, 9093 if usual else 0, taken)
        r = _pick(redis, 6379, taken)
        a = _pick(None, 8088 if usual else 0, taken)
        metrics = {
            name: _pick(None, 9464 + i if usual else 0, taken)
            for i, name in enumerate(METRIC_PROCESSES)
        }
        return cls(k, c, r, a, metrics)


BROKERS: Final = ("kafka", "tansu")


def default_broker() -> str:
    """Apache Kafka when a Java runtime is on PATH, else Tansu (no JVM; memory only)."""
    return "kafka" if shutil.which("java") else "tansu"


class Servers:
    """The broker (or a cluster of ``ports.brokers``) and Redis for one state directory,
    started and stopped by deploy/ scripts."""

    def __init__(self, state: Path, ports: DevPorts, log: Path, broker: str | None = None) -> None:
        self._state = state
        self._ports = ports
        self._log = log
        self.broker = broker or default_broker()
        self.started: list[str] = []

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "VIGIL_STATE": str(self._state),
            "VIGIL_BROKER": self.broker,
            "VIGIL_PYTHON": sys.executable,
            "KAFKA_PORT": str(self._ports.kafka),
            "KAFKA_CONTROLLER_PORT": str(self._ports.controller),
            "KAFKA_DATA_DIR": str(self._state / "kafka"),
            "KAFKA_CLUSTER_PORT": str(self._ports.kafka),
            "KAFKA_CLUSTER_DIR": str(self._state / "kafka-cluster"),
            "REDIS_PORT": str(self._ports.redis),
            "REDIS_DIR": str(self._state / "redis"),
        }

    def _verbs(self, name: str) -> tuple[list[str], list[str]]:
        """How ``name``'s script starts and stops this stack's server."""
        if name == "kafka" and self._ports.brokers > 1:
            return ["cluster-start", str(self._ports.brokers)], ["cluster-stop"]
        return ["start"], ["stop"]

    def _script(self, name: str, verb: list[str]) -> str:
        script = ROOT / "deploy" / name / f"{name}.sh"
        if not script.is_file():
            raise ConfigError(f"vigil dev needs the source tree's {script}: run it from a clone")
        with self._log.open("ab") as log:
            done = subprocess.run(
                ["bash", str(script), *verb],
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                timeout=600,
            )
        out = done.stdout.decode("utf-8", "replace").strip()
        if done.returncode != 0:
            said = out.splitlines()[-1] if out else f"see {self._log}"
            raise ConfigError(f"{name}.sh {' '.join(verb)} failed ({said})")
        return out

    def stop_commands(self) -> list[list[str]]:
        """The commands that stop both servers, with this stack's settings (for the guard)."""
        env = self._env()
        settings = [
            f"{k}={env[k]}"
            for k in ("VIGIL_STATE", "VIGIL_BROKER", "VIGIL_PYTHON", "KAFKA_PORT",
                      "KAFKA_CONTROLLER_PORT", "KAFKA_DATA_DIR", "KAFKA_CLUSTER_PORT",
                      "KAFKA_CLUSTER_DIR", "REDIS_PORT", "REDIS_DIR")
        ]  # fmt: skip
        return [
            ["env", *settings, "bash", str(ROOT / "deploy" / name / f"{name}.sh"), *stop]
            for name in ("redis", "kafka")
            for stop in [self._verbs(name)[1]]
        ]

    def start(self) -> list[str]:
        """Start both; returns the scripts' one-line reports."""
        lines = []
        for name in ("kafka", "redis"):
            lines.append(self._script(name, self._verbs(name)[0]).splitlines()[-1])
            self.started.append(name)
        return lines

    def stop(self) -> None:
        """Stop what this object started, Redis first; errors are reported, not raised."""
        for name in reversed(self.started):
            try:
                self._script(name, self._verbs(name)[1])
            except (ConfigError, subprocess.TimeoutExpired) as exc:
                print(f"vigil dev: stopping {name}: {exc}", file=sys.stderr)
        self.started.clear()
