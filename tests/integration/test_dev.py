"""``vigil dev`` on a fresh state dir: its own broker and Redis (on free ports, never the shared
dev servers), every process supervised, the demo delivered, metrics counting, README's
five-minute tour run as written, ``vigil doctor`` passing and then naming each failure once the
stack's own broker is stopped, Ctrl-C stopping everything it started (``test_dev_guard``: the
same when it is killed with SIGKILL)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline.ops.supervisor import Service, ServiceState, Supervisor
from tests.chaos.servers import worker_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
_TOUR = re.compile(r"^## A five-minute tour$(.*?)^## ", re.S | re.M)
_SHELL = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


def tour_blocks(readme: str) -> list[str]:
    """The shell blocks of README's tour, in order, as written."""
    found = _TOUR.search(readme)
    assert found is not None, "README has no '## A five-minute tour' section"
    return _SHELL.findall(found.group(1))


def _run_tour(workdir: Path, env: dict[str, str], evaluator_metrics: str) -> list[str]:
    """Run every block of the tour in one bash, as a reader pastes it: `set -e`, each command
    must succeed. Only the evaluator's metrics address is the one this `vigil dev` printed
    (the README says `vigil dev` prints each address: a busy 9465 moves it)."""
    script = "\n".join(tour_blocks((ROOT / "README.md").read_text(encoding="utf-8")))
    script = script.replace("http://127.0.0.1:9465/metrics", evaluator_metrics)
    script = script.replace("127.0.0.1:9465/metrics", evaluator_metrics)
    try:  # -x: each command on stderr, so a stall names the command it stalled in
        done = subprocess.run(
            ["bash", "-xeuo", "pipefail", "-c", script],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"the tour stalled:\n{_text(exc.stdout)}\n{_text(exc.stderr)}"
        ) from exc
    assert done.returncode == 0, f"the tour failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def _text(output: str | bytes | None) -> str:
    """What a timed-out run had written (``TimeoutExpired`` may hold bytes even in text mode)."""
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


ROOT = Path(__file__).resolve().parents[2]


def _lane_ports(first: int) -> tuple[int, int]:
    """A broker and a Redis port of this test process's lane (``first`` 3..8: 0..2 are the chaos
    fixtures'), below the ephemeral range: a port bound and released there can be taken by any
    outgoing connection before the server binds it ("port … is in use", once in CI)."""
    base, _, _ = worker_ports()
    return base + first, base + first + 1


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def _metric(url: str, name: str, match: str = "") -> float:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and match in line
    )


def _doctor(state: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli.main", "doctor", "--json"],
        env={**env, "VIGIL_CONFIG": str(state / "vigil.toml")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _failing_processes(state: Path, env: dict[str, str]) -> Any:
    """The doctor's run once every process's readiness says the broker is gone (else None)."""
    done = _doctor(state, env)
    checks = json.loads(done.stdout)["checks"]
    processes = [c for c in checks if c["check"].startswith("process ")]
    return done if processes and all(c["status"] == "fail" for c in processes) else None


def _readyz(url: str) -> str:
    """The status a process's ``/readyz`` answers (a 503 carries it too)."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return str(json.load(response)["status"])
    except urllib.error.HTTPError as exc:
        return str(json.load(exc)["status"])


def _told(lines: list[str], tmp_path: Path, state: Path) -> str:
    """What `vigil dev` printed and the end of each log: a failure names its cause."""
    logs = sorted((state / "logs").glob("*.log")) if (state / "logs").is_dir() else []
    tails = [f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}" for log in logs]
    stderr = (tmp_path / "dev.stderr").read_text(errors="replace")[-3000:]
    return "\n".join(["".join(lines), stderr, *tails])


def _path_without_java(bin_dir: Path) -> str:
    """A PATH with every program of this one except Java (and Maven): a machine without a JVM."""
    bin_dir.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        folder = Path(directory)
        if not folder.is_dir():
            continue
        for program in folder.iterdir():
            link = bin_dir / program.name
            if program.name in ("java", "mvn") or link.exists() or link.is_symlink():
                continue
            if os.access(program, os.X_OK) and not program.is_dir():
                link.symlink_to(program)
    return str(bin_dir)


@pytest.mark.parametrize("java", [True, False], ids=["kafka", "tansu-without-java"])
def test_dev_on_fresh_state_dir_gets_ready_delivers_demo_runs_the_tour_and_stops_cleanly(
    tmp_path: Path, java: bool
) -> None:
    # The tour runs where `make run` would: a directory with .venv/bin/vigil and examples/.
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    kafka_port, redis_port = _lane_ports(3)
    env = {
        **os.environ,
        "VIGIL_DEV_KAFKA_PORT": str(kafka_port),
        "VIGIL_DEV_REDIS_PORT": str(redis_port),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("VIGIL_CONFIG", None)
    env.pop("VIGIL_BROKER", None)  # the default: Kafka with Java, Tansu without
    if not java:
        env["PATH"] = _path_without_java(tmp_path / "bin-without-java")
        env.pop("JAVA_HOME", None)
    state = tmp_path / ".vigil" / "dev"
    errors = (tmp_path / "dev.stderr").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli.main", "dev"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
    reader.start()
    try:
        ready = "vigil dev: ready\n"
        _wait(lambda: ready in lines or proc.poll() is not None, 360, "ready")
        assert proc.poll() is None, "vigil dev exited"
        # `ready` only once every process says so: each stage joined its group and caught up.
        for where in sorted((state / "run").glob("vigil.*.dev.url")):
            assert _readyz(where.read_text().strip()) == "ready", where.name
        broker = "kafka" if java else "tansu"
        assert f"; starting {broker} and redis" in lines[0]
        _wait(lambda: any("demo notification delivered" in line for line in lines), 120,
              "the demo notification")  # fmt: skip
        urls = dict(re.findall(r"metrics\s+(\S+)\s+(http://\S+/metrics)", "".join(lines)))
        assert set(urls) == {"command-processor", "evaluator", "ticker", "delivery"}
        assert _metric(urls["evaluator"], "vigil_evaluator_evaluations_total") > 0
        assert _metric(urls["delivery"], "vigil_delivery_results_total", 'result="delivered"') > 0
        # group_protocol = "auto": KIP-848 where the broker serves it, classic on Tansu.
        protocol = "consumer" if java else "classic"
        for name, url in urls.items():
            assert _metric(url, "vigil_runtime_group_protocol", f'protocol="{protocol}"') == 1, name
        assert _answers(kafka_port) and _answers(redis_port)
        delivered = (state / "logs" / "delivery.log").read_text()
        assert "demo-build-failed" in delivered
        tour_env = {k: v for k, v in env.items() if not k.startswith("VIGIL_")}
        tour_env["VIGIL_MASTER_KEYS"] = env.get("VIGIL_MASTER_KEYS", "")
        if not tour_env["VIGIL_MASTER_KEYS"]:
            tour_env.pop("VIGIL_MASTER_KEYS")
        tour_env["PATH"] = env["PATH"]
        out = "\n".join(_run_tour(tmp_path, tour_env, urls["evaluator"]))
        assert "demo.builds" in out and "demo-build-failed" in out  # grant list, watch list
        assert "created release-build-failed" in out
        assert "vigil_evaluator_evaluations" in out
        vigil = str(tmp_path / ".venv" / "bin" / "vigil")
        tour_env["VIGIL_CONFIG"] = str(state / "vigil.toml")

        def explained() -> str:
            shown = subprocess.run(
                [vigil, "explain", "release-build-failed"],
                env=tour_env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            return shown.stdout if "delivered" in shown.stdout else ""

        lines_b1 = _wait(explained, 120, "b-1 satisfied and delivered")
        assert "condition_true" in lines_b1 and "condition_false" in lines_b1
        tour_log = (state / "logs" / "delivery.log").read_text()
        assert '"message":"Build b-1 failed on release/1.2"' in tour_log  # the README's line

        if java:  # vigil doctor passes, then names each failure once the broker stops
            passing = _doctor(state, env)
            assert passing.returncode == 0, passing.stdout
            checks = {c["check"]: c for c in json.loads(passing.stdout)["checks"]}
            assert {c["status"] for c in checks.values()} == {"pass"}, checks
            processes = {name for name in checks if name.startswith("process ")}
            assert {p.split(".")[0] for p in processes} == {
                "process command-processor", "process evaluator", "process ticker",
                "process delivery", "process daemon", "process api",
            }  # fmt: skip
            stopped = subprocess.run(
                ["bash", str(ROOT / "deploy" / "kafka" / "kafka.sh"), "stop"],
                env={**env, "KAFKA_DATA_DIR": str(state / "kafka"), "KAFKA_PORT": str(kafka_port)},
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert stopped.returncode == 0, stopped.stderr
            failing = _wait(lambda: _failing_processes(state, env), 60, "processes to see it")
            assert failing.returncode == 69, failing.stdout
            checks = {c["check"]: c for c in json.loads(failing.stdout)["checks"]}
            assert checks["broker"]["status"] == "fail"
            assert f"127.0.0.1:{kafka_port}" in checks["broker"]["detail"]
            assert checks["redis"]["status"] == "pass"
            assert checks["topics"]["status"] == "skip"
            for name in processes:
                assert checks[name]["status"] == "fail" and "broker" in checks[name]["detail"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_told(lines, tmp_path, state)}") from None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
        reader.join(10)
        assert proc.stdout is not None
        proc.stdout.close()
        errors.close()
    assert code == 0, "".join(lines)
    assert lines[-1].strip() == "vigil dev: stopped"
    assert not _answers(kafka_port) and not _answers(redis_port)


def test_supervisor_restarts_a_crashed_service_with_doubling_backoff_and_stops_the_rest(
    tmp_path: Path,
) -> None:
    now = [0.0]
    crash = Service("crash", [sys.executable, "-c", "raise SystemExit(3)"], os.environ,
                    tmp_path / "crash.log")  # fmt: skip
    stay = Service("stay", [sys.executable, "-c", "import time; time.sleep(60)"], os.environ,
                   tmp_path / "stay.log")  # fmt: skip
    group = Supervisor([crash, stay], backoff_start_s=1.0, backoff_max_s=3.0, clock=lambda: now[0])
    group.start()
    try:
        delays = []
        for _ in range(4):
            assert crash.proc is not None
            crash.proc.wait(10)
            events = group.poll()
            assert any("crash exited with 3" in e for e in events), events
            delays.append(crash.delay)
            assert crash.state is ServiceState.BACKING_OFF
            assert group.poll() == []  # not due yet
            now[0] += crash.delay
            assert group.poll() == [f"crash restarted (restart {len(delays)})"]
        assert delays == [1.0, 2.0, 3.0, 3.0]
        assert stay.state is ServiceState.RUNNING and stay.restarts == 0
        assert group.status().startswith("2/2 up")
    finally:
        group.stop(timeout_s=10)
    assert stay.proc is not None and stay.proc.returncode == -signal.SIGTERM
    assert group.running() == 0
