"""docker-compose.yml runs as shipped: every vigil service has what its process refuses to start
without — the configuration, a key-encryption key, its topics, the broker and Redis, and for the
daemon and delivery one shared socket directory. No Docker engine exists here, so the compose file
and the image's Dockerfile are parsed, the configuration is the real one loaded by vigil, and the
key service's command runs for real on a temporary directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from pipeline.config import VigilConfig, load_config
from pipeline.crypto import KeyEncryptionKeys

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "deploy" / "vigil" / "Dockerfile").read_text(encoding="utf-8")
PROCESSES = ("command-processor", "evaluator", "ticker", "delivery", "daemon", "api")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    found: dict[str, Any] = compose["services"]
    return found


@pytest.fixture(scope="module")
def config() -> VigilConfig:
    """The configuration the image carries, loaded as a process in the image loads it."""
    (copied,) = re.findall(r"^COPY deploy/vigil/vigil.toml (\S+)$", DOCKERFILE, re.M)
    (env,) = re.findall(r"^ENV VIGIL_CONFIG=(\S+)", DOCKERFILE, re.M)
    assert env == copied, "VIGIL_CONFIG names the file the image copies"
    return load_config(ROOT / "deploy" / "vigil" / "vigil.toml", environ={})


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Container path -> (volume or host path, writable)."""
    out: dict[str, tuple[str, bool]] = {}
    for item in service.get("volumes", []):
        source, target, *mode = str(item).split(":")
        out[target] = (source, mode != ["ro"])
    return out


def _waits_for(service: dict[str, Any], other: str, condition: str) -> bool:
    depends = service.get("depends_on", {})
    return isinstance(depends, dict) and depends.get(other, {}).get("condition") == condition


def test_every_vigil_process_reads_the_key_the_keys_service_writes(
    services: dict[str, Any], config: VigilConfig
) -> None:
    key_file = config.privacy.master_key_file
    assert key_file is not None, "[privacy] master_key_file: a process refuses to start without"
    directory = str(PurePosixPath(str(key_file)).parent)
    volume, writable = _mounts(services["vigil-keys"])[directory]
    assert writable
    for name in PROCESSES:
        service = services[name]
        assert service["command"] == [name]
        assert _mounts(service).get(directory) == (volume, False), name
        assert _waits_for(service, "vigil-keys", "service_completed_successfully"), name
        assert config.privacy.master_key_env not in service.get("environment", {}), name
    assert re.search(rf"mkdir -p [^\n]*{re.escape(directory)}", DOCKERFILE)
    assert re.search(rf"chown vigil [^\n]*{re.escape(directory)}", DOCKERFILE)


def _key_command(service: dict[str, Any], directory: str, into: Path) -> list[str]:
    """The key service's shell command, run here: compose's ``$$`` is a ``$``, the volume a
    temporary directory, and ``vigil`` this checkout's."""
    assert service["entrypoint"] == ["sh", "-c"]
    (script,) = service["command"]
    vigil = Path(sys.executable).parent / "vigil"
    script = script.replace("$$", "$").replace(directory, str(into))
    return ["sh", "-c", script.replace("vigil keys", f"{vigil} keys")]


def test_the_keys_service_writes_a_key_once_that_vigil_accepts(
    services: dict[str, Any], config: VigilConfig, tmp_path: Path
) -> None:
    key_file = PurePosixPath(str(config.privacy.master_key_file))
    command = _key_command(services["vigil-keys"], str(key_file.parent), tmp_path)
    subprocess.run(command, check=True, timeout=60, env={**os.environ, "VIGIL_CONFIG": ""})
    written = tmp_path / key_file.name
    keks = KeyEncryptionKeys.load("VIGIL_TEST_NO_SUCH_VARIABLE", file=written, environ={})
    assert len(keks.ids) == 1
    assert written.stat().st_mode & 0o077 == 0, "readable by its owner only"
    first = written.read_bytes()
    subprocess.run(command, check=True, timeout=60, env={**os.environ, "VIGIL_CONFIG": ""})
    assert written.read_bytes() == first, "a restart never replaces the key"
    assert not list(tmp_path.glob("*.new"))


def test_the_daemon_and_delivery_share_the_socket_directory(
    services: dict[str, Any], config: VigilConfig
) -> None:
    socket = config.rpc.socket_path
    assert socket is not None
    directory = str(PurePosixPath(str(socket)).parent)
    daemon = _mounts(services["daemon"]).get(directory)
    delivery = _mounts(services["delivery"]).get(directory)
    assert daemon is not None and daemon[1], "the daemon creates its socket there"
    assert delivery == daemon, "delivery asks the daemon to run fired `run` and `prompt`"
    assert services["delivery"]["pid"] == "service:daemon", "its pid means something there"
    assert _waits_for(services["delivery"], "daemon", "service_started")
    assert re.search(rf"chown vigil [^\n]*{re.escape(directory)}", DOCKERFILE)


def test_every_vigil_process_waits_for_its_topics_broker_and_redis(
    services: dict[str, Any], config: VigilConfig
) -> None:
    kafka_host = config.kafka.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]
    redis_host = config.redis.url.get_secret_value().split("//", 1)[1].split(":")[0]
    assert {kafka_host, redis_host} <= set(services)
    assert kafka_host in services["vigil-topics"]["depends_on"]
    assert services["vigil-topics"]["command"] == ["topics", "create"]
    for name in PROCESSES:
        service = services[name]
        assert _waits_for(service, "vigil-topics", "service_completed_successfully"), name
        assert _waits_for(service, redis_host, "service_started"), name
