"""``vigil doctor``'s checks: is this deployment, as configured here, able to run?

Owns :func:`diagnose` and :class:`Finding`: configuration, broker and Redis, topics, cluster
durability, each process's ``/readyz`` and hot path, clock skew within :data:`MAX_SKEW_S`. A check
an earlier failure blocks says so rather than timing out; no check raises. Leaves out printing
(``pipeline.cli.doctor_cmd``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from pipeline.config import ENV_PREFIX, VigilConfig, config_file, env_overrides
from pipeline.kafka import durability
from pipeline.kafka.admin import connect_admin, describe
from pipeline.kafka.durability import broker_settings
from pipeline.kafka.reach import probe_broker
from pipeline.kafka.skew import broker_clock_skew
from pipeline.ops.health import state_dir
from pipeline.redis.reach import probe_redis, redacted
from pipeline.rules.errors import VigilError

__all__ = ["MAX_SKEW_S", "Finding", "Status", "diagnose", "process_ready", "worst"]

MAX_SKEW_S: Final = 2.0  # freshness allows 30 s of future skew; a few seconds is already odd
_HTTP_TIMEOUT_S: Final = 3.0


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"  # could not run: an earlier check failed


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    status: Status
    detail: str
    unavailable: bool = False  # a server did not answer (the CLI exits 69)

    def as_json(self) -> dict[str, object]:
        return {k: (v.value if isinstance(v, Status) else v) for k, v in asdict(self).items()}


def diagnose(
    config: VigilConfig,
    *,
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Every check, in order (see the module docstring)."""
    findings = [_configuration(config, config_path, environ)]
    broker = _broker(config)
    findings.append(broker)
    findings.append(_redis(config))
    topics = _topics(config) if broker.status is Status.PASS else None
    findings.append(topics or Finding("topics", Status.SKIP, "the broker does not answer"))
    if broker.status is Status.PASS:
        findings.extend(_cluster(config))
    else:
        findings.append(Finding("cluster", Status.SKIP, "the broker does not answer"))
    findings.extend(_processes(config, environ))
    if topics is not None and topics.status is Status.PASS:  # it writes to <prefix>doctor
        findings.append(_skew(config))
    else:
        findings.append(Finding("clock", Status.SKIP, "the broker or the topics are not ready"))
    return findings


def _configuration(
    config: VigilConfig, path: Path | None, environ: Mapping[str, str] | None
) -> Finding:
    found = config_file(path, environ=environ)
    source = str(found) if found is not None else "built-in defaults (no vigil.toml found)"
    overridden = sorted(_flatten(env_overrides(environ)))
    if overridden:
        source += f"; overridden by {', '.join(overridden)}"
    detail = (
        f"{source}; namespace {config.namespace.name}, topics {config.kafka.topic_prefix}*, "
        f"broker {config.kafka.bootstrap_servers}, "
        f"redis {redacted(config.redis.url.get_secret_value())}"
    )
    return Finding("config", Status.PASS, detail)


def _flatten(tree: Mapping[str, object], prefix: str = ENV_PREFIX) -> list[str]:
    names: list[str] = []
    for key, value in tree.items():
        name = f"{prefix}{key.upper()}"
        names.extend(_flatten(value, name + "__") if isinstance(value, Mapping) else [name])
    return names


def _broker(config: VigilConfig) -> Finding:
    try:
        info = probe_broker(config.kafka.bootstrap_servers)
    except VigilError as exc:
        return Finding("broker", Status.FAIL, str(exc), unavailable=True)
    brokers = ", ".join(info.brokers) or "none advertised"
    return Finding(
        "broker",
        Status.PASS,
        f"cluster {info.cluster_id}, brokers {brokers}, controller {info.controller or 'unknown'}",
    )


def _redis(config: VigilConfig) -> Finding:
    try:
        version = probe_redis(config.redis.url.get_secret_value())
    except VigilError as exc:
        return Finding("redis", Status.FAIL, str(exc), unavailable=True)
    return Finding(
        "redis", Status.PASS, f"{redacted(config.redis.url.get_secret_value())}, Redis {version}"
    )


def _topics(config: VigilConfig) -> Finding:
    topology = config.kafka.topology()
    try:
        statuses = describe(connect_admin(config.kafka.bootstrap_servers), topology)
    except VigilError as exc:
        return Finding("topics", Status.FAIL, str(exc))
    problems = [p for s in statuses if (p := s.problem()) is not None]
    if problems:
        hint = f"; fix: {topology.create_command()}"
        return Finding("topics", Status.FAIL, "; ".join(problems) + hint)
    return Finding(
        "topics", Status.PASS, f"{len(statuses)} topics with their partitions and configs"
    )


def _cluster(config: VigilConfig) -> list[Finding]:
    """What would lose acknowledged data or stall transactions on this cluster, a finding
    per line (``pipeline.kafka.durability``)."""
    admin = connect_admin(config.kafka.bootstrap_servers)
    try:
        settings = broker_settings(admin)
        if settings is None:
            return [Finding("cluster", Status.SKIP, "the cluster does not describe its configs")]
        lines = durability.findings(settings, describe(admin, config.kafka.topology()))
    except VigilError as exc:
        return [Finding("cluster", Status.FAIL, str(exc))]
    if lines:
        return [Finding("cluster", Status.FAIL, line) for line in lines]
    if settings.brokers < 2:
        return [Finding("cluster", Status.PASS, "one broker: nothing is replicated (development)")]
    return [
        Finding(
            "cluster",
            Status.PASS,
            f"{settings.brokers} brokers: vigil's topics, the transaction state log and the "
            "offsets topic outlive one broker's loss; unclean leader election off",
        )
    ]


def _processes(config: VigilConfig, environ: Mapping[str, str] | None) -> list[Finding]:
    run = state_dir(environ, config.instance.state_dir) / "run"
    namespace = config.namespace.name
    files = sorted(run.glob(f"{namespace}.*.url")) if run.is_dir() else []
    if not files:
        return [
            Finding(
                "processes",
                Status.FAIL,
                f"no process of namespace {namespace} has written its address in {run}",
            )
        ]
    return [process_ready(path, namespace) for path in files]


def process_ready(path: Path, namespace: str) -> Finding:
    """Whether the process whose address file is ``path`` answers ``/readyz`` ready; when it
    does not, its failing checks (``vigil dev`` waits on the same finding)."""
    name = path.name.removeprefix(f"{namespace}.").removesuffix(".url")
    try:
        url = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return Finding(f"process {name}", Status.FAIL, f"unreadable {path}: {exc.strerror}")
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=_HTTP_TIMEOUT_S) as response:
            body = json.loads(response.read(65536))
        hot = body.get("hot_path", "unknown") if isinstance(body, dict) else "unknown"
        return Finding(f"process {name}", Status.PASS, f"ready ({url}), {hot} hot path")
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read(65536))
        except ValueError:
            body = {}
        checks = body.get("checks", {}) if isinstance(body, dict) else {}
        failing = (
            [f"{k}: {v}" for k, v in checks.items() if v != "ok"]
            if isinstance(checks, dict)
            else []
        )
        return Finding(f"process {name}", Status.FAIL, f"not ready ({url}): " + "; ".join(failing))
    except (OSError, ValueError) as exc:
        return Finding(
            f"process {name}", Status.FAIL, f"does not answer on {url} ({type(exc).__name__})"
        )


def _skew(config: VigilConfig) -> Finding:
    try:
        skew = broker_clock_skew(config.kafka.bootstrap_servers, config.kafka.topic_prefix)
    except VigilError as exc:
        return Finding("clock", Status.FAIL, f"cannot compare clocks: {exc}")
    status = Status.PASS if abs(skew) <= MAX_SKEW_S else Status.FAIL
    side = "ahead of" if skew >= 0 else "behind"
    return Finding("clock", status, f"the broker is {abs(skew):.3f}s {side} this host")


def worst(findings: Sequence[Finding]) -> int:
    """The exit code: 0 all pass, 69 a server did not answer, 1 anything else failed."""
    if all(f.status is not Status.FAIL for f in findings):
        return 0
    return 69 if any(f.unavailable for f in findings) else 1
