"""Every vigil process of one deployment, as real processes, for fault scenarios and the soak.

:class:`Stack` writes one ``vigil.toml`` (its own broker, Redis, a webhook destination, a
Telegram-shaped chat and a governed ``http.json@v1`` tool, all at the test's receiver, large
budget caps), creates the topics
with ``vigil topics create`` and runs ``python -m pipeline.cli.main <process>`` for each of
:data:`PIPELINE`, each logging to its own file. It can kill one with SIGKILL and start it again
(same instance id, so ``init_transactions`` fences what the dead one left open), tell which
exited on their own (a process that must recover by itself never does), read each one's RSS and
open file descriptors from ``/proc``, and stop them all with SIGTERM, returning their exit codes.

``topic_prefix`` and ``namespace`` place the deployment on a shared broker and Redis beside
others (``[instance] namespace``). ``clock_rate`` sets ``VIGIL_TEST_CLOCK_RATE`` /
``VIGIL_TEST_CLOCK_ANCHOR`` for every process: their clocks run that many times faster than the
wall clock from a shared anchor (the knob is test-only; ``pipeline.clock.clock_from_env``), so
minutes of cron ticks take seconds. ``args`` adds command-line options per process
(``{"ticker": ["--static-membership"]}``). ``evaluator#2`` names a second member of a stage's
group (its own instance id); ``replication`` the topics' replication factor (a cluster's 3).

Left out: the servers (``tests.chaos.servers``) and what is checked (``tests.chaos.checker``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

from pipeline.clock import CLOCK_ANCHOR_ENV, CLOCK_RATE_ENV, Clock, ScaledClock, SystemClock
from pipeline.kafka.topics import Topology

__all__ = ["BOT_TOKEN", "CHAT", "CHAT_ID", "HOOK", "PIPELINE", "SECRET", "TOOL", "Stack"]

ROOT: Final = Path(__file__).resolve().parents[2]
VIGIL: Final = (sys.executable, "-m", "pipeline.cli.main")
PIPELINE: Final = ("command-processor", "evaluator", "ticker", "delivery")
HOOK: Final = "hook"  # the webhook destination every watcher of the scenarios names
TOOL: Final = "status"  # the governed tool every polling watcher names
SECRET: Final = "whsec_" + "Y2hhb3MtdGVzdC1zZWNyZXQtZm9yLXZpZ2lsLWhvb2s="
SECRET_ENV: Final = "VIGIL_CHAOS_HOOK_SECRET"
CHAT: Final = "ops"  # the Telegram-shaped chat schedules send to
CHAT_ID: Final = "4242"
BOT_TOKEN: Final = "123:chaos-bot"
BOT_TOKEN_ENV: Final = "VIGIL_CHAOS_BOT_TOKEN"
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")


class Stack:
    """One vigil deployment in ``root``: configuration, topics, processes and their logs."""

    def __init__(
        self,
        root: Path,
        *,
        bootstrap: str,
        redis_url: str,
        receiver_url: str,
        partitions: int = 4,
        clock_rate: float | None = None,
        args: Mapping[str, Iterable[str]] | None = None,
        topic_prefix: str = "vigil.",
        namespace: str | None = None,
        replication: int = 1,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.redis_url = redis_url
        self.topology = Topology(topic_prefix, partitions, replication_factor=replication)
        self.config = root / "vigil.toml"
        instance = '[instance]\nid = "chaos"\n' + (
            "" if namespace is None else f'namespace = "{namespace}"\n'
        )
        self.config.write_text(
            f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopic_prefix = "{topic_prefix}"\n'
            f"partitions = {partitions}\nreplication_factor = {replication}\n\n"
            f'[redis]\nurl = "{redis_url}"\n\n'
            f"{instance}\n"
            f'[destinations.{HOOK}]\nkind = "webhook"\nurl = "{receiver_url}/hook"\n'
            f'secret_env = "{SECRET_ENV}"\ntimeout = "5s"\n\n'
            f'[tools.{TOOL}]\nkind = "http.json@v1"\nurl = "{receiver_url}/status"\n'
            f'timeout = "5s"\n\n'
            f'[chats.{CHAT}]\nkind = "telegram"\napi_base = "{receiver_url}"\n'
            f'token_env = "{BOT_TOKEN_ENV}"\nchat_id = "{CHAT_ID}"\n\n'
            # One window far longer than any run: a token charged twice would show as two
            # charges, never as one charge in each of two windows.
            f'[budgets.defaults]\nwindow = "3650d"\nevaluations = 100000000\n'
            f"deliveries = 100000000\nattempts = 100000000\n",
            encoding="utf-8",
        )
        self.env = {
            **os.environ,
            "VIGIL_CONFIG": str(self.config),
            SECRET_ENV: SECRET,
            BOT_TOKEN_ENV: BOT_TOKEN,
            "PYTHONUNBUFFERED": "1",
        }
        self.clock: Clock = SystemClock()
        if clock_rate is not None:
            anchor = time.time()
            self.env[CLOCK_RATE_ENV] = repr(clock_rate)
            self.env[CLOCK_ANCHOR_ENV] = repr(anchor)
            self.clock = ScaledClock(anchor, clock_rate)
        self._args = {name: list(extra) for name, extra in (args or {}).items()}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.kills: dict[str, int] = {}
        self.unexpected: dict[str, int] = {}  # processes that exited on their own, by code
        self._down: set[str] = set()  # killed by the test and not started again yet

    def now(self) -> datetime:
        """The deployment's clock (scaled when ``clock_rate`` is set)."""
        return self.clock.now()

    # -- setup ---------------------------------------------------------------------------

    def create_topics(self) -> None:
        done = self.vigil("topics", "create")
        if done.returncode != 0:
            raise AssertionError(f"vigil topics create failed: {done.stderr[-2000:]}")

    def vigil(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*VIGIL, *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    # -- processes -----------------------------------------------------------------------

    def start(self, name: str) -> None:
        """Start ``name``: a process of :data:`PIPELINE`, or ``<process>#<n>``, a further member
        of its group (instance id ``chaos-<n>``)."""
        kind, _, member = name.partition("#")
        instance = ["--instance", f"chaos-{member}"] if member else []
        args = [*VIGIL, kind, "--no-metrics", *instance, *self._args.get(kind, ())]
        self._down.discard(name)
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                args, env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
            )

    def start_all(self, names: Iterable[str] = PIPELINE) -> None:
        for name in names:
            self.start(name)

    def kill(self, name: str) -> None:
        """SIGKILL ``name`` and reap it."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        self.kills[name] = self.kills.get(name, 0) + 1
        self._down.add(name)

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def check_alive(self) -> None:
        """Record every process that exited although nobody stopped it (it did not recover)."""
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None and name not in self.unexpected and name not in self._down:
                self.unexpected[name] = code

    def stop_all(self, timeout_s: float = 60.0) -> dict[str, int | None]:
        """SIGTERM every process that is still running, wait; returns each one's exit code."""
        self.check_alive()
        live = {n: p for n, p in self.procs.items() if p.poll() is None}
        for proc in live.values():
            proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout_s
        for name, proc in live.items():
            try:
                codes[name] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                codes[name] = None
        return codes

    def log(self, name: str, tail: int = 4000) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-tail:] if path.exists() else ""

    def logs(self, tail: int = 3000) -> str:
        """The tail of every process's log, for an assertion message."""
        return "\n".join(f"--- {n} ---\n{self.log(n, tail)}" for n in self.procs)

    # -- resources -----------------------------------------------------------------------

    def rss_bytes(self, name: str) -> int | None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return None
        try:
            pages = int(Path(f"/proc/{proc.pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            return None
        return pages * _PAGE

    def open_fds(self, name: str) -> int | None:
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return None
        try:
            return len(os.listdir(f"/proc/{proc.pid}/fd"))
        except OSError:
            return None
