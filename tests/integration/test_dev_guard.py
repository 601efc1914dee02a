"""``vigil dev`` killed with SIGKILL (no handler runs): its supervised processes die with it
(``PR_SET_PDEATHSIG``) and its broker and Redis are stopped by its guard process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.test_dev import _answers, _lane_ports, _wait

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def test_dev_killed_with_sigkill_takes_its_children_and_servers_with_it(tmp_path: Path) -> None:
    kafka_port, redis_port = _lane_ports(5)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VIGIL_CONFIG", None)
    state = tmp_path / "state"
    argv = [sys.executable, "-m", "pipeline.cli.main", "dev", "--state-dir", str(state),
            "--no-demo", "--kafka-port", str(kafka_port),
            "--redis-port", str(redis_port)]  # fmt: skip
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
    reader.start()
    try:
        _wait(lambda: "vigil dev: ready\n" in lines or proc.poll() is not None, 300, "ready")
        assert proc.poll() is None, "".join(lines)
        ports = [int(p) for p in re.findall(r"http://127\.0\.0\.1:(\d+)/metrics", "".join(lines))]
        assert len(ports) == 4, "".join(lines)
        # Each answered when dev said ready; a connect on a machine at load 30+ can still miss
        # its second, so it is polled (the supervisor's own lines say if a process restarted).
        said = "".join(lines)[-2000:]
        _wait(lambda: all(_answers(p) for p in ports), 60, f"every metrics port; dev said:\n{said}")
    finally:
        proc.kill()  # no handler runs: only the guard and the kernel can clean up
        proc.wait(30)
        reader.join(10)
        assert proc.stdout is not None
        proc.stdout.close()
    everything = [kafka_port, redis_port, *ports]
    _wait(lambda: not any(_answers(p) for p in everything), 120, "every child to stop")
