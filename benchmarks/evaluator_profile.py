"""Where the evaluator's time goes, wall-clock and CPU: ``benchmarks.evaluator``'s main phase
sampled by py-spy.

``python -m benchmarks.evaluator_profile`` builds the benchmark's world (10,000 watchers on 1,000
sources, every event matching one), indexes and compiles it, then attaches ``py-spy record`` to
this process for the stream app's steps over ``BENCH_EVENTS`` (default 20000) events only (group
join, loading and indexing are left out, as in the benchmark). It runs twice, on a fresh world
each time: ``wall`` samples idle frames too (``--idle``: where the loop waits — commits, Redis,
polls), ``cpu`` only frames on the CPU. py-spy samples from outside the process, so, unlike
cProfile, it does not inflate small calls. Prints one JSON object: per mode, the samples taken
inside ``StreamApp.step``, and the ``BENCH_TOP`` (default 20) functions by inclusive share
(their own frames and what they call) and by own share (the leaf frame). Env:
``KAFKA_BOOTSTRAP_SERVERS``, ``REDIS_URL``, ``PYSPY`` (default: ``py-spy`` next to this
interpreter), ``PYSPY_RATE`` (default 250 samples/s), ``PYSPY_NATIVE`` (set: ``--native``,
so the compiled hot path's own frames show), ``BENCH_KEEP`` (a directory to keep the raw
collapsed stacks in, for a flame graph). ``hot_path`` names the path the run used.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from benchmarks.evaluator import _evaluate, _world
from consumers.evaluator.loop import Evaluator
from pipeline.crypto import generate_kek_text
from pipeline.rules.native import path_name

__all__ = ["main"]

_STEP = "StreamApp.step ("


def _pyspy() -> str:
    found = os.environ.get("PYSPY") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        found = shutil.which("py-spy") or ""
    if not found:
        raise SystemExit("py-spy is not installed: pip install py-spy (the dev extra has it)")
    return found


class _Sampler:
    """One ``py-spy record`` attached to this process, started and stopped around the steps."""

    def __init__(self, out: Path, idle: bool) -> None:
        self.out = out
        self.idle = idle
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        rate = os.environ.get("PYSPY_RATE", "250")
        command = [_pyspy(), "record", "--pid", str(os.getpid()), "--format", "raw"]
        command += ["--function", "--rate", rate, "--output", str(self.out)]
        if self.idle:
            command.append("--idle")
        if os.environ.get("PYSPY_NATIVE"):
            command.append("--native")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.process.stdout is not None
        for line in self.process.stdout:  # wait until it samples: its first line says so
            if b"Sampling process" in line:
                return
        raise RuntimeError(f"py-spy did not start: {self.process.wait()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGINT)
        self.process.communicate(timeout=60)


def _frame(frame: str) -> str:
    """``name (path:line)`` or ``name (path)`` with the path cut to the repository."""
    for marker in ("site-packages/", "/work/", "lib/python3"):
        cut = frame.find(marker)
        if cut >= 0:
            rest = frame[cut + len(marker) :]
            if marker == "/work/":  # drop the worktree's own directories
                rest = rest.split("/", 2)[-1] if rest.count("/") >= 2 else rest
            return frame[: frame.index("(") + 1] + rest
    return frame


def _top(stacks: Path, top: int) -> dict[str, Any]:
    """Inclusive and own shares of the frames inside ``StreamApp.step``."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in stacks.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        frames = [_frame(f) for f in stack.split(";")]
        starts = [i for i, f in enumerate(frames) if f.startswith(_STEP)]
        if not starts or not count_text.isdigit():
            continue
        count = int(count_text)
        inner = frames[starts[0] :]
        total += count
        for name in set(inner):
            inclusive[name] += count
        own[inner[-1]] += count

    def rows(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "share": round(n / max(total, 1), 3)}
            for name, n in counter.most_common(top)
        ]

    return {"samples_in_step": total, "inclusive": rows(inclusive), "own": rows(own)}


def _profile(bootstrap: str, redis_url: str, n: int, idle: bool, out: Path) -> dict[str, Any]:
    topology, loader, sources = _world(bootstrap, 1_000, 0)
    sampler = _Sampler(out, idle)
    prepare = Evaluator.prepare

    def prepared(self: Evaluator, compile_definitions: bool = False) -> int:
        found = prepare(self, compile_definitions)
        sampler.start()
        return found

    Evaluator.prepare = prepared  # type: ignore[method-assign]
    try:
        run = _evaluate(bootstrap, redis_url, topology, loader, sources, n, compiled=True)
    finally:
        Evaluator.prepare = prepare  # type: ignore[method-assign]
        sampler.stop()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics(
        [t for t in admin.list_topics(timeout=10).topics if t.startswith(topology.prefix)]
    )
    return {"run": run, **_top(out, int(os.environ.get("BENCH_TOP", "20")))}


def main() -> None:
    os.environ.setdefault("VIGIL_MASTER_KEYS", generate_kek_text("bench"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    n = int(os.environ.get("BENCH_EVENTS", "20000"))
    keep = os.environ.get("BENCH_KEEP")
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(keep or scratch)
        where.mkdir(parents=True, exist_ok=True)
        modes = {
            mode: _profile(bootstrap, redis_url, n, mode == "wall", where / f"{mode}.txt")
            for mode in ("wall", "cpu")
        }
    path = path_name()
    print(json.dumps({"benchmark": "evaluator_profile", "events": n, "hot_path": path, **modes}))


if __name__ == "__main__":
    main()
