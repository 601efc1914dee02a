"""A vigil process's secrets out of its neighbours' reach (DESIGN.md §10): real processes, real
``/proc``. Once hardened and its secrets concealed, a process shows no secret in
``/proc/<pid>/environ`` (even to root) and passes none to a child that inherits its environment,
while its own ``os.environ`` still reads it; another process of the same uid cannot read its
environment at all; a child started through ``clean_start`` holds no capability."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from pipeline.control.isolation import AgentUser, clean_start

pytestmark = pytest.mark.unit

VALUE: Final = "kek-value-never-shown"
TARGET: Final = """\
import os, subprocess, sys
from pipeline.control.hardening import conceal, harden, is_hardened
harden()
conceal(["X_SECRET"])
inherited = subprocess.run(["/bin/sh", "-c", 'printf %s "$X_SECRET"'], capture_output=True)
print(is_hardened(), os.environ.get("X_SECRET"), inherited.stdout.decode() or "-", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def target(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, "X_SECRET": VALUE, "X_PLAIN": "plain-value"}
    proc = subprocess.Popen(
        [sys.executable, "-c", TARGET],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    try:
        yield proc, line
    finally:
        proc.communicate("\n", timeout=10)


def test_a_concealed_secret_leaves_proc_environ_and_children_but_not_os_environ(
    target: tuple[subprocess.Popen[str], str],
) -> None:
    proc, line = target
    assert line == f"True {VALUE} -"  # non-dumpable; os.environ reads it; a child does not
    shown = Path(f"/proc/{proc.pid}/environ").read_bytes()  # we are root, or the same uid
    assert VALUE.encode() not in shown and b"X_SECRET" not in shown
    assert b"X_PLAIN=plain-value" in shown


def _agent_user() -> AgentUser:
    if os.geteuid() != 0:
        pytest.skip("running processes under another uid needs root")
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    return AgentUser("nobody", entry.pw_uid, entry.pw_gid, Path("/"))


def test_another_process_of_the_same_uid_cannot_read_a_hardened_environment() -> None:
    user = _agent_user()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 to run under another uid")
    secret_env = {"PATH": "/usr/bin:/bin", "X_SECRET": VALUE}
    # Each says it is ready (hardened or not) before the reader looks: no race with its start-up.
    ready = "print('ready', flush=True); sys.stdin.readline()"
    hardened = f"import ctypes, sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); {ready}"
    plain = f"import sys; {ready}"
    reader = (
        "import sys\n"
        "try:\n    open(f'/proc/{sys.argv[1]}/environ', 'rb').read(); print('read')\n"
        "except PermissionError:\n    print('denied')\n"
    )
    for code, expected in ((plain, "read"), (hardened, "denied")):
        proc = subprocess.Popen(
            [python, "-c", code],
            env=secret_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=clean_start(user),
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            seen = subprocess.run(
                [python, "-c", reader, str(proc.pid)],
                capture_output=True,
                text=True,
                preexec_fn=clean_start(user),
                timeout=60,
            )
            assert seen.stdout.strip() == expected, seen.stderr
        finally:
            proc.communicate(b"\n", timeout=10)


def test_a_clean_start_holds_no_capability_as_root_or_as_another_user() -> None:
    users: list[AgentUser | None] = [None]
    if os.geteuid() == 0:
        users.append(_agent_user())
    for user in users:
        status = subprocess.run(
            ["/bin/cat", "/proc/self/status"],
            capture_output=True,
            text=True,
            preexec_fn=clean_start(user),
            check=True,
        ).stdout
        caps = dict(line.split(":", 1) for line in status.splitlines() if line.startswith("Cap"))
        assert {k: v.strip() for k, v in caps.items() if k != "CapBnd"} == {
            "CapInh": "0000000000000000",
            "CapPrm": "0000000000000000",
            "CapEff": "0000000000000000",
            "CapAmb": "0000000000000000",
        }
        assert "NoNewPrivs:\t1" in status
        if user is not None:
            assert f"Uid:\t{user.uid}\t{user.uid}\t{user.uid}\t{user.uid}" in status
