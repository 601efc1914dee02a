"""A fault test's own Apache Kafka broker and Redis, started and stopped by the project's scripts.

Scenarios restart, stall and stop these servers, so they must never be the shared ones
(``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL``, which other tests use at the same time). Each runs
on ports derived from the pytest-xdist worker id (:func:`worker_ports`): distinct per worker,
below the ephemeral range the OS hands out for ``port 0``, so neither a concurrent worker nor
another test's free-port pick can take them. :class:`OwnKafka` and :class:`OwnRedis` wrap
``deploy/kafka/kafka.sh`` and ``deploy/redis/redis.sh`` with those ports and a temporary data
directory; :meth:`OwnKafka.stall` and :meth:`OwnKafka.resume` send SIGSTOP / SIGCONT to this
broker's own pid (read from its pid file), never to anything found by name.

Left out: vigil's processes (``tests.chaos.stack``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["OwnKafka", "OwnRedis", "OwnRedisCluster", "ServerError", "worker_ports"]

ROOT: Final = Path(__file__).resolve().parents[2]
KAFKA_SH: Final = ROOT / "deploy" / "kafka" / "kafka.sh"
REDIS_SH: Final = ROOT / "deploy" / "redis" / "redis.sh"
_BASE_PORT: Final = 31_400  # below Linux's ephemeral range (32768-60999)
_PER_WORKER: Final = 10


class ServerError(RuntimeError):
    """A deploy script failed: its last output line says why."""


def worker_ports(worker: str | None = None, slot: int = 0) -> tuple[int, int, int]:
    """(Kafka, Kafka controller, Redis) ports for an xdist worker (``gw3`` → 3; no xdist → 9).

    ``slot`` 0–2 gives a second or third set for the same worker (the soak benchmark run by
    hand uses slot 2 of worker 9).
    """
    worker = worker if worker is not None else os.environ.get("PYTEST_XDIST_WORKER", "")
    found = re.fullmatch(r"gw(\d+)", worker)
    index = int(found.group(1)) if found else 9
    base = _BASE_PORT + (index * 3 + slot) * _PER_WORKER
    return base, base + 1, base + 2


def _run(script: Path, verb: str, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", str(script), verb],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise ServerError(f"{script.name} {verb}: {lines[-1] if lines else done.returncode}")
    return done.stdout.strip()


@dataclass
class OwnKafka:
    """A one-node KRaft broker of the project's ``kafka.sh`` on this test's own ports."""

    port: int
    controller_port: int
    data_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. a SASL_SSL listener's

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        return {
            "VIGIL_BROKER": "kafka",
            "VIGIL_PYTHON": sys.executable,
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(self.controller_port),
            "KAFKA_DATA_DIR": str(self.data_dir),
            "KAFKA_START_TIMEOUT": "120",
            **self.extra_env,
        }

    def start(self) -> str:
        return _run(KAFKA_SH, "start", self._env(), 300)

    def stop(self) -> str:
        """SIGTERM and wait (the script SIGKILLs after its timeout); a no-op when not running."""
        return _run(KAFKA_SH, "stop", self._env(), 120)

    def pid(self) -> int | None:
        path = self.data_dir / "kafka.pid"
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def stall(self) -> None:
        """SIGSTOP this broker: its sockets stay open, nothing answers."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        pid = self.pid()
        if pid is None:
            raise ServerError(f"no broker pid in {self.data_dir}")
        os.kill(pid, sig)


@dataclass
class OwnRedis:
    """A redis-server of the project's ``redis.sh`` on this test's own port, with the script's
    default append-only file, so a restart keeps counters and idempotency tokens."""

    port: int
    data_dir: Path
    appendonly: bool = True

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _env(self) -> dict[str, str]:
        return {
            "REDIS_PORT": str(self.port),
            "REDIS_DIR": str(self.data_dir),
            "REDIS_APPENDONLY": "yes" if self.appendonly else "no",
        }

    def start(self) -> str:
        return _run(REDIS_SH, "start", self._env(), 120)

    def stop(self) -> str:
        return _run(REDIS_SH, "stop", self._env(), 60)


@dataclass
class OwnRedisCluster:
    """A Redis Cluster of ``len(ports)`` masters from the project's ``redis.sh cluster-start``
    (each node a redis-server of its own under ``data_dir/<port>``; its cluster bus on its port
    plus ``bus_offset``), stopped by ``cluster-stop``."""

    ports: tuple[int, ...]
    data_dir: Path
    bus_offset: int

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def _env(self) -> dict[str, str]:
        return {
            "REDIS_CLUSTER_PORTS": " ".join(str(port) for port in self.ports),
            "REDIS_CLUSTER_BUS_OFFSET": str(self.bus_offset),
            "REDIS_DIR": str(self.data_dir),
            "REDIS_APPENDONLY": "no",
        }

    def start(self) -> str:
        return _run(REDIS_SH, "cluster-start", self._env(), 120)

    def stop(self) -> str:
        return _run(REDIS_SH, "cluster-stop", self._env(), 120)
