"""The ``vigil`` executable arms its stop handler before anything slow loads: a service told to
stop while it is still importing stops cleanly (exit 0) instead of dying of SIGTERM (-15)."""

import functools
import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

# Runs as `vigil evaluator --help` would, in a fresh interpreter: which heavy modules the entry
# module's import loads, and whether SIGTERM is caught when the command group starts loading.
_PROBE = textwrap.dedent(
    """
    import json, signal, sys
    sys.argv = ["vigil", "--config", "absent.toml", "evaluator", "--help"]
    import pipeline.cli.main as entry
    heavy = sorted(m for m in ("pipeline.config", "pydantic", "click", "confluent_kafka", "redis")
                   if m in sys.modules)
    seen = {}

    class Probe:
        def find_spec(self, name, path=None, target=None):
            if name == "pipeline.cli.group" and "armed" not in seen:
                seen["armed"] = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
            return None

    sys.meta_path.insert(0, Probe())
    try:
        entry.main()
    except SystemExit as exc:
        seen["exit"] = exc.code
    print(json.dumps({"heavy": heavy, **seen}))
    """
)


@functools.cache
def _probe() -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_entry_module_loads_nothing_slow() -> None:
    assert _probe()["heavy"] == []


def test_a_service_catches_sigterm_before_the_command_group_loads() -> None:
    probe = _probe()
    assert probe["armed"] is True
    assert probe["exit"] == 0  # and the group still runs: `evaluator --help` printed its help
