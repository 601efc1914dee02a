"""``deploy/systemd``: one unit per long-running process, each accepted by
``systemd-analyze verify`` (with ``ExecStart`` pointed at this checkout's ``vigil``); the daemon
serves its socket from ``RuntimeDirectory=vigil``, ``/run/vigil/vigil.sock`` (seed 001), the one
``[rpc] socket_path`` it and delivery (whose fired prompts and runs ask it) both read."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.ops.health import PROCESS_PORT_OFFSETS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"


def test_every_process_has_a_unit_and_systemd_accepts_them(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: .ci/run installs the systemd package"
    vigil = Path(sys.executable).with_name("vigil")
    assert vigil.exists(), vigil
    names = {f"vigil-{process}.service" for process in PROCESS_PORT_OFFSETS}
    assert names <= {p.name for p in UNITS.glob("*.service")}
    copies = []
    for unit in [*sorted(UNITS.glob("*.service")), UNITS / "vigil.target"]:
        text = unit.read_text(encoding="utf-8")
        copy = tmp_path / unit.name
        copy.write_text(text.replace("/usr/local/bin/vigil", str(vigil)), encoding="utf-8")
        copies.append(str(copy))
    done = subprocess.run(
        [analyze, "verify", "--man=no", *copies],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    daemon = (UNITS / "vigil-daemon.service").read_text(encoding="utf-8")
    assert "RuntimeDirectory=vigil\n" in daemon
    socket = "Environment=VIGIL_RPC__SOCKET_PATH=/run/vigil/vigil.sock\n"
    delivery = (UNITS / "vigil-delivery.service").read_text(encoding="utf-8")
    assert socket in daemon and socket in delivery  # one setting both read
    assert "--socket" not in daemon
    # The agent under a user of its own; the daemon holds only what switches to it.
    assert "Environment=VIGIL_AGENT__RUN_AS=vigil-agent\n" in daemon
    assert "AmbientCapabilities=CAP_SETUID CAP_SETGID CAP_CHOWN CAP_SETPCAP\n" in daemon
    target = (UNITS / "vigil.target").read_text(encoding="utf-8")
    assert all(name in target for name in names)
