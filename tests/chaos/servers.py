"""A fault test's own Apache Kafka broker and Redis, started and stopped by the project's scripts.

Scenarios restart, stall and stop these servers, so they must never be the shared ones
(``KAFKA_BOOTSTRAP_SERVERS`` / ``REDIS_URL``, which other tests use at the same time). Each runs
on its process's own ports (:func:`worker_ports`): each test process holds a lane of ports
through a lock file while it lives, so no concurrent worker — of this run or of another run on
the same machine — uses them, and they lie below the ephemeral range the OS hands out for
``port 0``, so no test's free-port pick can take them either. :class:`OwnKafka` and
:class:`OwnRedis` wrap ``deploy/kafka/kafka.sh`` and ``deploy/redis/redis.sh`` with those
ports and a temporary data directory; :meth:`OwnKafka.stall` and :meth:`OwnKafka.resume` send
SIGSTOP / SIGCONT to this broker's own pid (read from its pid file), never to anything found by
name.

:class:`OwnKafkaCluster` is ``kafka.sh cluster-start``'s three KRaft nodes on the lane's second
set of ports, killed, stopped and started node by node; :class:`OwnRedisSentinel` a primary, its
replica and one Sentinel (Debian's ``redis-sentinel``) on the third.

Left out: vigil's processes (``tests.chaos.stack``).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

import redis

from pipeline.ops.dev_stack import port_free

__all__ = [
    "OwnKafka",
    "OwnKafkaCluster",
    "OwnRedis",
    "OwnRedisCluster",
    "OwnRedisSentinel",
    "ServerError",
    "worker_ports",
]

ROOT: Final = Path(__file__).resolve().parents[2]
KAFKA_SH: Final = ROOT / "deploy" / "kafka" / "kafka.sh"
REDIS_SH: Final = ROOT / "deploy" / "redis" / "redis.sh"
_BASE_PORT: Final = 31_400  # below Linux's ephemeral range (32768-60999)
_PER_SLOT: Final = 10
_SLOTS: Final = 3
_LANES: Final = 40  # 40 lanes of 30 ports: 31400-32599
_LOCKS: Final = Path(tempfile.gettempdir()) / "vigil-test-ports"
_lane: list[tuple[int, IO[str]]] = []  # this process's lane and its held lock file


class ServerError(RuntimeError):
    """A deploy script failed: its last output line says why."""


def worker_ports(slot: int = 0) -> tuple[int, int, int]:
    """(Kafka, Kafka controller, Redis) ports of this process's lane, ``slot`` 0–2 giving a
    second or third set of ten ports for the same process.

    The lane is the first of 40 whose lock file (in the temporary directory) this process can
    lock and none of whose ports is taken; it keeps the lock until it exits, so two test runs
    on one machine never share ports, and a server orphaned by an interrupted run (still
    listening, its lock gone with its process) costs a lane, not a test.
    """
    if not 0 <= slot < _SLOTS:
        raise ValueError(f"slot {slot}: 0..{_SLOTS - 1}")
    if not _lane:
        _LOCKS.mkdir(exist_ok=True)
        for lane in range(_LANES):
            held = (_LOCKS / f"lane-{lane}.lock").open("w")
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.close()
                continue
            if not _lane_free(lane):
                held.close()
                continue
            _lane.append((lane, held))
            break
        else:
            raise ServerError(f"every one of {_LANES} port lanes is held by another test process")
    base = _BASE_PORT + (_lane[0][0] * _SLOTS + slot) * _PER_SLOT
    return base, base + 1, base + 2


def _lane_free(lane: int) -> bool:
    """Whether every port of ``lane`` can be bound on 127.0.0.1 now."""
    first = _BASE_PORT + lane * _SLOTS * _PER_SLOT
    return all(port_free(port) for port in range(first, first + _SLOTS * _PER_SLOT))


def _run(script: Path, verb: str, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", str(script), *verb.split()],
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


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a parent that may never reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


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

    def kill(self, deadline_s: float = 60.0) -> None:
        """SIGKILL this broker and wait until its process is gone: a crash, down at once."""
        pid = self.pid()
        if pid is None:
            raise ServerError(f"no broker pid in {self.data_dir}")
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + deadline_s
        while _alive(pid):
            if time.monotonic() > deadline:
                raise ServerError(f"broker pid {pid} outlived SIGKILL by {deadline_s:.0f} s")
            time.sleep(0.05)

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
class OwnKafkaCluster:
    """``nodes`` combined KRaft nodes of the project's ``kafka.sh cluster-start``: node *i*
    on ``first_port + 2(i-1)`` (its controller on the next port), data under ``data_dir``."""

    first_port: int
    data_dir: Path
    nodes: int = 3

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port(node)}" for node in range(1, self.nodes + 1))

    def port(self, node: int) -> int:
        return self.first_port + 2 * (node - 1)

    def _env(self) -> dict[str, str]:
        return {
            "VIGIL_PYTHON": sys.executable,
            "KAFKA_CLUSTER_PORT": str(self.first_port),
            "KAFKA_CLUSTER_DIR": str(self.data_dir),
            "KAFKA_START_TIMEOUT": "120",
        }

    def _run(self, *args: str, timeout: float = 300) -> str:
        return _run(KAFKA_SH, " ".join(args), self._env(), timeout)

    def start(self) -> str:
        return self._run("cluster-start", str(self.nodes))

    def stop(self) -> str:
        return self._run("cluster-stop")

    def kill(self, node: int) -> str:
        """SIGKILL one node: a crash, no controlled shutdown."""
        return self._run("kill", str(node))

    def stop_node(self, node: int) -> str:
        """Stop one node cleanly (its leadership moves first)."""
        return self._run("stop", str(node), timeout=120)

    def start_node(self, node: int) -> str:
        return self._run("start", str(node))

    def controller(self) -> int:
        """The node that is the active controller now."""
        return int(self._run("controller", timeout=60))


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


@dataclass
class OwnRedisSentinel:
    """A Redis primary, its asynchronous replica and one Sentinel watching them (quorum 1, a
    primary down after 1 s), each a process of its own under ``data_dir``: the smallest
    deployment whose primary fails over. No append-only file: what the replica had is all that
    survives a primary's death."""

    primary_port: int
    replica_port: int
    sentinel_port: int
    data_dir: Path
    service: str = "vigil"
    _procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """vigil's ``[redis] url`` for it: through the Sentinel, to whichever is primary."""
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.service}/0"

    def _server(self, port: int, *extra: str) -> None:
        folder = self.data_dir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
        args += ["--save", "", "--appendonly", "no", *extra]
        self._spawn(port, args, folder)

    def _spawn(self, port: int, args: list[str], folder: Path) -> None:
        with (folder / "log").open("ab") as log:
            self._procs[port] = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        _wait_answers(port)

    def start(self) -> None:
        self._server(self.primary_port)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        folder = self.data_dir / str(self.sentinel_port)
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "sentinel.conf"  # Sentinel rewrites its own file: ours to give
        config.write_text(
            f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {folder}\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.primary_port} 1\n"
            f"sentinel down-after-milliseconds {self.service} 1000\n"
            f"sentinel failover-timeout {self.service} 10000\n",
            encoding="utf-8",
        )
        self._spawn(self.sentinel_port, ["redis-sentinel", str(config)], folder)

    def primary(self) -> int:
        """The port Sentinel names as primary now."""
        client = redis.Redis(port=self.sentinel_port, decode_responses=True, socket_timeout=2)
        try:
            host = client.execute_command(  # type: ignore[no-untyped-call]
                "SENTINEL", "get-master-addr-by-name", self.service
            )
        finally:
            client.close()
        return int(host[1])

    def kill(self, port: int) -> None:
        """SIGKILL the server on ``port``: whatever it had not yet replicated is gone."""
        proc = self._procs.pop(port)
        proc.kill()
        proc.wait(30)

    def stop(self) -> None:
        for proc in self._procs.values():
            proc.terminate()
        for proc in self._procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._procs.clear()


def _wait_answers(port: int, timeout_s: float = 20.0) -> None:
    client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise ServerError(f"nothing answers PING on 127.0.0.1:{port}") from None
                time.sleep(0.1)
    finally:
        client.close()
