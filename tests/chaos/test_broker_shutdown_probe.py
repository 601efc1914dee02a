"""A broker shutting down never takes a vigil process with it through the readiness probe.

Every process asks whether the broker answers every two seconds (``/readyz``'s ``broker``
check, ``pipeline.kafka.reach.probe_broker``). With DescribeCluster, a KRaft broker in
controlled shutdown answered with no brokers and no topics and librdkafka 2.16 aborted the
asking process (``rd_kafka_admin_response_parse: Assertion `rko_result' failed``): an API
process died that way in CI, and 7 of 12 probing loops did on this machine. Here four
processes probe back to back while this test's own broker stops; each must see it answer,
then see it gone, and exit 0.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.chaos.servers import OwnKafka

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

LOOPS = 4
_PROBING = textwrap.dedent(
    """
    import sys, time
    from pipeline.kafka.reach import probe_broker
    from pipeline.rules.errors import UnavailableError

    answered = gone = 0
    deadline = time.monotonic() + 240
    while gone < 10 and time.monotonic() < deadline:  # ten answers of "gone" in a row
        try:
            probe_broker(sys.argv[1], 0.5)
        except UnavailableError:
            gone += 1 if answered else 0
            continue
        answered += 1
        gone = 0
        if answered == 1:
            print("answered", flush=True)
    print(f"answered {answered} gone {gone}", flush=True)
    """
)


def test_processes_probing_while_the_broker_shuts_down_all_survive(kafka: OwnKafka) -> None:
    loops = [
        subprocess.Popen(
            [sys.executable, "-c", _PROBING, kafka.bootstrap],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(LOOPS)
    ]
    try:
        for loop in loops:  # each has seen the broker answer before it stops
            assert loop.stdout is not None
            assert loop.stdout.readline().strip() == "answered"
        kafka.stop()
        results = [loop.communicate(timeout=240) for loop in loops]
    finally:
        for loop in loops:
            if loop.poll() is None:
                loop.kill()
                loop.wait(10)
    for loop, (out, err) in zip(loops, results, strict=True):
        assert loop.returncode == 0, f"exit {loop.returncode} after shutdown: {err[-2000:]}"
        assert out.strip().endswith("gone 10"), out
