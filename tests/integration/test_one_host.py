"""Every process of ``vigil.example.toml`` starts on one host at once, each on its own metrics
port (``[metrics] listen`` plus the process's offset), and each one's ``/readyz`` flips to ready:
broker and Redis answer, the member joined its group and the group is caught up, the daemon's
grant exists. The example file is used as shipped; ``VIGIL_<SECTION>__<KEY>`` variables point it
at the shared test servers, a private topic prefix and namespace, and ports of this worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pipeline.ops.health import PROCESS_PORT_OFFSETS
from tests.chaos.servers import worker_ports
from tests.names import fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("command-processor", "evaluator", "ticker", "delivery")
PROCESSES = (*STAGES, "daemon", "api")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def test_every_process_of_the_example_config_starts_on_one_host_and_gets_ready(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    run = fresh("oh")
    base = worker_ports(slot=1)[0]  # ten ports of this test process, none used by others
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")},
        "VIGIL_MASTER_KEYS": os.environ["VIGIL_MASTER_KEYS"],
        "VIGIL_CONFIG": str(ROOT / "vigil.example.toml"),
        "VIGIL_KAFKA__BOOTSTRAP_SERVERS": kafka_bootstrap,
        "VIGIL_KAFKA__TOPIC_PREFIX": f"t{run}.",
        "VIGIL_KAFKA__PARTITIONS": "2",
        "VIGIL_KAFKA__REPLICATION_FACTOR": "1",
        "VIGIL_REDIS__URL": redis_url,
        "VIGIL_INSTANCE__NAMESPACE": f"one-host-{run}",
        "VIGIL_INSTANCE__STATE_DIR": str(tmp_path / "state"),
        "VIGIL_METRICS__LISTEN": f"127.0.0.1:{base}",
        "VIGIL_API__LISTEN": "127.0.0.1:0",
        "VIGIL_RPC__SOCKET_PATH": str(tmp_path / "run" / "vigil.sock"),
        "VIGIL_RUN__ALLOW_DIR": str(tmp_path / "scripts"),
        # The example's agent needs run_as or this explicit opt-in (a user of its own needs root).
        "VIGIL_AGENT__ALLOW_SAME_UID": "true",
        "OPS_HOOK_SECRET": "whsec_" + "c2VjcmV0LWZvci10aGUtb25lLWhvc3QtdGVzdA==",
        "TELEGRAM_BOT_TOKEN": "123:one-host",
        "VIGIL_CHATS__PHONE__LISTEN": "false",  # no long poll of the real Bot API from a test
        "PYTHONUNBUFFERED": "1",
    }
    vigil = [sys.executable, "-m", "pipeline.cli.main"]
    made = subprocess.run(
        [*vigil, "topics", "create"], env=env, capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: tmp_path / f"{name}.log" for name in PROCESSES}
    try:
        for name in PROCESSES:
            with logs[name].open("wb") as log:
                procs[name] = subprocess.Popen(
                    [*vigil, name], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT
                )
        ports = {name: base + PROCESS_PORT_OFFSETS[name] for name in PROCESSES}
        waiting = set(PROCESSES)
        deadline = time.monotonic() + 180
        answers: dict[str, str] = {}
        while waiting and time.monotonic() < deadline:
            for name in sorted(waiting):
                exited = procs[name].poll()
                assert exited is None, f"{name} exited {exited}: {logs[name].read_text()[-2000:]}"
                status, body = _get(f"http://127.0.0.1:{ports[name]}/readyz")
                answers[name] = body
                if status == 200:
                    answer = json.loads(body)
                    assert answer["status"] == "ready"
                    if name in STAGES:  # never ready before it has joined its group
                        assert {"assigned", "caught_up"} <= {
                            check.split(":", 1)[0] for check in answer["checks"]
                        }, answer
                    waiting.discard(name)
            time.sleep(0.5)
        assert not waiting, {name: answers.get(name) for name in waiting}
        for name in PROCESSES:
            assert _get(f"http://127.0.0.1:{ports[name]}/healthz")[0] == 200
            status, metrics = _get(f"http://127.0.0.1:{ports[name]}/metrics")
            assert status == 200 and "python_info" in metrics
        lag = _get(f"http://127.0.0.1:{ports['evaluator']}/metrics")[1]
        assert f'vigil_consumer_group_lag{{group="one-host-{run}.evaluator"' in lag
        written = sorted(p.name for p in (tmp_path / "state" / "run").glob("*.url"))
        assert written == sorted(f"one-host-{run}.{name}.node-1.url" for name in PROCESSES)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        codes = {name: proc.wait(60) for name, proc in procs.items()}
    assert codes == dict.fromkeys(PROCESSES, 0), codes
