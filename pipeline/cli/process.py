"""What every long-running ``vigil`` process does before its loop, in one place.

Logging, configuration, key-encryption keys (none: refuse to start, saying how to fix it), topics
(missing or drifted: refuse, naming the fix), the stable instance id, the clock
(``pipeline.clock.clock_from_env``), the ``/metrics`` server and the SIGTERM stop event; and
:func:`run_stage`, which runs a built stage until then. Leaves out each process's loop and topics
(its command module)."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import click
from prometheus_client import REGISTRY

from pipeline.cli import shutdown
from pipeline.cli.context import CliState
from pipeline.cli.options import chosen_group_protocol, chosen_level
from pipeline.clock import Clock, clock_from_env
from pipeline.config import VigilConfig
from pipeline.crypto import KeyEncryptionKeys
from pipeline.kafka import properties
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.reach import probe_broker
from pipeline.kafka.topics import Topic, Topology
from pipeline.ops.health import HealthServer, address_file, listen_address, state_dir
from pipeline.redis.budgets import RedisBudgets
from pipeline.redis.reach import probe_redis
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings
from pipeline.rules.errors import ConfigError, UnavailableError
from pipeline.rules.namespace import Namespace
from pipeline.runtime.assignment import GroupProtocol, resolve_group_protocol
from pipeline.runtime.stage import Stage

__all__ = ["Process", "await_app", "run_stage", "serve_health", "start", "watch_app"]

log = logging.getLogger(__name__)

_SETUP: Final = "setup"


@dataclass(frozen=True, slots=True)
class Process:
    """A started process: its configuration, topology, instance id, clock and stop event."""

    config: VigilConfig
    topology: Topology
    instance_id: str
    stop: threading.Event
    default_caps: BudgetCaps  # the operator's caps for watchers that leave some out
    keks: KeyEncryptionKeys  # [privacy]: unwrap the data keys of sealed subject fields
    clock: Clock
    ceilings: BudgetCeilings = NO_CEILINGS  # the most any window may allow ([budgets.ceilings])
    health: HealthServer | None = None  # /metrics, /healthz, /readyz (None: --no-metrics)
    group_protocol: GroupProtocol = GroupProtocol.CLASSIC  # resolved once, at start

    def watch(self, app: Any) -> None:
        """Add ``app``'s readiness (assigned, caught up) to this process's ``/readyz``."""
        watch_app(self.health, app, self.topology)

    @property
    def bootstrap(self) -> str:
        return self.config.kafka.bootstrap_servers

    @property
    def namespace(self) -> Namespace:
        """The deployment namespace: every group, transactional id and Redis key carries it."""
        return self.config.namespace

    def group(self, stage: str) -> str:
        """This deployment's consumer group of ``stage`` (``<namespace>.<stage>``)."""
        return self.namespace.group(stage)

    def budgets(self, *, quick_retry: bool = False) -> RedisBudgets:
        """The budget store of ``[redis] url`` under this deployment's namespace (no network
        until the first charge)."""
        return RedisBudgets.from_url(
            self.config.redis.url.get_secret_value(),
            key_prefix=self.namespace.budget_prefix,
            quick_retry=quick_retry,
        )


def start(
    state: CliState,
    topics: Iterable[Topic],
    *,
    name: str,
    instance: str | None,
    metrics: bool,
    verbose: bool,
    redis: bool = False,
) -> Process:
    """Log at INFO with ``-v`` (else WARNING; librdkafka's own lines only with ``-v``), check
    that the broker (and with ``redis``, Redis) answers within seconds, check ``topics``, serve
    ``/metrics`` on ``[metrics] listen`` unless told not to, choose the group protocol
    (``--group-protocol`` or ``[kafka] group_protocol``; ``auto`` asks the broker once) and
    arm the stop event."""
    level = chosen_level("info" if verbose else "warning")
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    properties.verbose(level in ("debug", "info"))
    config = state.config
    keks = config.privacy.keks()  # first: a missing KEK is one line and no broker round trip
    topology = config.kafka.topology()
    state.reach_kafka()
    if redis:
        probe_redis(config.redis.url.get_secret_value())
    check_topology(connect_admin(config.kafka.bootstrap_servers), topology, tuple(topics))
    protocol = resolve_group_protocol(
        chosen_group_protocol(config.kafka.group_protocol),
        config.kafka.bootstrap_servers,
        properties.active().for_consumer(),
    )
    stop = shutdown.catch()
    instance_id = instance or config.instance.resolved_id()
    health = serve_health(config, name, instance_id, redis=redis) if metrics else None
    await_app(health)
    return Process(
        config,
        topology,
        instance_id,
        stop,
        config.budgets.defaults,
        keks,
        clock_from_env(os.environ),
        config.budgets.ceilings,
        health,
        protocol,
    )


def run_stage(process: Process, name: str, stage: Stage) -> None:
    """Run a built ``stage`` until SIGTERM: its readiness on ``/readyz``, a line on stderr
    when it runs and when it stopped."""
    app = stage.app
    process.watch(app)
    click.echo(f"{name} {app.group_id}/{app.instance_id} running", err=True)
    stage.run(process.stop)
    click.echo(f"{name} stopped", err=True)


def serve_health(
    config: VigilConfig, name: str, instance_id: str, *, redis: bool = False
) -> HealthServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` of process ``name`` on its own port (see
    ``[metrics]``), with the broker (and with ``redis``, Redis) as readiness checks; its URL is
    printed and written to the state directory for ``vigil doctor``."""
    host, port = listen_address(
        config.metrics.listen,
        name,
        {str(k): v for k, v in config.metrics.ports.items()}.get(name),
    )
    bootstrap = config.kafka.bootstrap_servers
    try:
        server = HealthServer(host, port, max_lag=config.metrics.max_lag, bootstrap=bootstrap)
    except OSError as exc:
        raise ConfigError(
            f"metrics.listen: cannot listen on {host}:{port} for {name}: {exc.strerror}; "
            f"set [metrics.ports] {name} (0 picks a free port)"
        ) from None
    server.add("broker", _reachable(lambda: probe_broker(bootstrap)))
    if redis:
        url = config.redis.url.get_secret_value()
        server.add("redis", _reachable(lambda: probe_redis(url)))
    server.start()
    where = address_file(
        state_dir(configured=config.instance.state_dir), config.namespace.name, name, instance_id
    )
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(server.url + "\n", encoding="utf-8")
        atexit.register(where.unlink, missing_ok=True)
    except OSError as exc:
        log.warning("cannot write %s: %s", where, exc)
    click.echo(f"{name}: metrics and health on {server.url}", err=True)
    return server


def await_app(health: HealthServer | None) -> None:
    """Not ready before the process knows its group: :func:`watch_app` replaces this check
    (else ``/readyz`` says ready between the broker answering and the group's checks)."""
    if health is not None:
        health.add(_SETUP, lambda: "starting: its stream app is not built yet")


def watch_app(health: HealthServer | None, app: Any, topology: Topology) -> None:
    """Readiness of a stream app: it joined its group, and the group is caught up."""
    if health is None:
        return
    group = app.group_id

    def assigned() -> str | None:
        joined = REGISTRY.get_sample_value(
            "vigil_runtime_rebalances_total", {"group": group, "event": "assigned"}
        )
        return None if joined else "starting: not assigned yet"

    health.add(f"assigned:{group}", assigned)
    partitions = [(topic, p) for topic in app.inputs for p in range(_count(topology, topic))]
    health.watch_group(group, partitions)
    health.remove(_SETUP)  # last: never a moment with neither


def _count(topology: Topology, name: str) -> int:
    for topic in Topic:
        if topology.name(topic) == name:
            return topology.partitions_for(topic)
    return topology.partitions


def _reachable(probe: Callable[[], object]) -> Callable[[], str | None]:
    def check() -> str | None:
        try:
            probe()
        except UnavailableError as exc:
            return str(exc)
        return None

    return check
