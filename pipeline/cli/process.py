"""What every long-running ``vigil`` process does before its loop, in one place: logging, the
configuration, its key-encryption keys (none configured: it refuses to start, saying how to fix
it), refusing to start on missing or drifted topics (with the command that fixes them), its
stable instance id, its clock (the real one; a fault test may scale it through the environment,
``pipeline.clock.clock_from_env``), the ``/metrics`` server and the stop event SIGTERM sets.

Leaves out each process's own loop and which topics it needs (its command module says).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import click
from prometheus_client import start_http_server

from pipeline.cli import shutdown
from pipeline.cli.context import CliState
from pipeline.cli.options import chosen_level
from pipeline.clock import Clock, clock_from_env
from pipeline.config import VigilConfig
from pipeline.crypto import KeyEncryptionKeys
from pipeline.kafka.admin import check_topology, connect_admin
from pipeline.kafka.topics import Topic, Topology
from pipeline.redis.budgets import RedisBudgets
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings

__all__ = ["Process", "serve_metrics", "start"]


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

    @property
    def bootstrap(self) -> str:
        return self.config.kafka.bootstrap_servers

    def budgets(self, *, quick_retry: bool = False) -> RedisBudgets:
        """The budget store of ``[redis] url`` (no network until the first charge)."""
        return RedisBudgets.from_url(
            self.config.redis.url.get_secret_value(), quick_retry=quick_retry
        )


def start(
    state: CliState,
    topics: Iterable[Topic],
    *,
    instance: str | None,
    metrics: bool,
    verbose: bool,
) -> Process:
    """Log at INFO with ``-v`` (else WARNING), check ``topics``, serve ``/metrics`` on
    ``[metrics] listen`` unless told not to, and arm the stop event."""
    logging.basicConfig(
        level=chosen_level("info" if verbose else "warning").upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    config = state.config
    keks = config.privacy.keks()  # first: a missing KEK is one line and no broker round trip
    topology = config.kafka.topology()
    check_topology(connect_admin(config.kafka.bootstrap_servers), topology, tuple(topics))
    if metrics:
        click.echo(f"metrics on port {serve_metrics(config.metrics.listen)}", err=True)
    stop = shutdown.catch()
    instance_id = instance or config.instance.resolved_id()
    return Process(
        config,
        topology,
        instance_id,
        stop,
        config.budgets.defaults.caps(),
        keks,
        clock_from_env(os.environ),
        config.budgets.ceilings.ceilings(),
    )


def serve_metrics(listen: str) -> int:
    """Serve ``/metrics`` on ``host:port`` (port 0 picks one); returns the bound port."""
    host, _, port = listen.rpartition(":")
    server, _thread = start_http_server(int(port), addr=host.strip("[]") or "0.0.0.0")
    return int(server.server_port)
