"""Bounded capture: a child that talks without end keeps at most the cap and is not killed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.control.capture import communicate

pytestmark = pytest.mark.unit

_FLOOD = """\
import sys
data = sys.stdin.buffer.read()
chunk = b"x" * 65536
for _ in range(160):  # 10 MiB on each pipe
    sys.stdout.buffer.write(chunk)
    sys.stderr.buffer.write(chunk)
sys.stdout.buffer.write(b"read %d" % len(data))
"""


def _start(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_a_flood_on_both_pipes_keeps_the_cap_and_the_child_runs_to_its_end() -> None:
    proc = _start(_FLOOD)
    got = communicate(proc, b"y" * 300_000, cap=4096, timeout_s=60)
    assert proc.returncode == 0  # not killed for talking
    assert (got.stdout, got.stderr) == (b"x" * 4096, b"x" * 4096)
    total = 160 * 65536
    assert got.stderr_dropped == total - 4096
    assert got.stdout_dropped == total + len(b"read 300000") - 4096


def test_output_under_the_cap_is_kept_whole() -> None:
    proc = _start("import sys; print(sys.stdin.read()[::-1]); print('e', file=sys.stderr)")
    got = communicate(proc, b"abc", cap=4096, timeout_s=60)
    assert (got.stdout, got.stderr, got.stdout_dropped, got.stderr_dropped) == (
        b"cba\n",
        b"e\n",
        0,
        0,
    )


def test_a_child_past_the_deadline_is_a_timeout() -> None:
    with _start("import time; time.sleep(30)") as proc:
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                communicate(proc, b"", cap=4096, timeout_s=0.5)
        finally:
            proc.kill()
