"""``vigil dev``: everything on one machine, for a first look.

Owns the run: broker and Redis in the state directory, the topics, every vigil process as one
supervised group, a demo loaded once every process answers ``/readyz``, where things listen,
then ``ready``; SIGINT or SIGTERM stops it all, any other death takes the children with it
(``pipeline.ops.guard``). Leaves out the pieces (``pipeline.ops.dev_stack``, ``supervisor``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Final

import click

from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from pipeline.ops.dev_stack import (
    BROKERS,
    Demo,
    DevPorts,
    Servers,
    addresses,
    metric_total,
    new_token,
    not_ready,
    replication,
    services,
    write_config,
)
from pipeline.ops.guard import Guard
from pipeline.ops.supervisor import Supervisor
from pipeline.rules.errors import VigilError

__all__ = ["dev"]

_EVENT_EVERY_S: Final = 10.0
_STATUS_EVERY_S: Final = 2.0
_UP_TIMEOUT_S: Final = 240.0  # a first start on a loaded machine: broker, groups, the grant
_WAITING_EVERY_S: Final = 15.0


def _say(text: str) -> None:
    # A closed pipe (`make run | tee log` after Ctrl-C) must not stop the stopping.
    with contextlib.suppress(OSError):
        click.echo(f"vigil dev: {text}")


@click.command()
@click.option(
    "--state-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(".vigil/dev"),
    show_default=True,
    help="Where the broker, Redis, config and logs live.",
)
@click.option(
    "--kafka-port", type=int, envvar="VIGIL_DEV_KAFKA_PORT", help="Default: 9092 if free."
)
@click.option(
    "--redis-port", type=int, envvar="VIGIL_DEV_REDIS_PORT", help="Default: 6379 if free."
)
@click.option("--partitions", default=3, show_default=True, help="Partitions per topic.")
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Apache Kafka nodes: more than one runs a KRaft cluster (kafka.sh cluster-start), "
    "topics replicated up to 3 (min ISR 2). Three JVMs want ~2 GiB.",
)
@click.option("--no-demo", is_flag=True, help="Start the stack without the demo.")
@click.option(
    "--broker",
    type=click.Choice(BROKERS),
    envvar="VIGIL_BROKER",
    help="Apache Kafka, or Tansu (no JVM: memory only, slower group joins). "
    "Default: kafka when Java is on PATH, else tansu; `make run` passes $VIGIL_BROKER.",
)
def dev(
    state_dir: Path,
    kafka_port: int | None,
    redis_port: int | None,
    partitions: int,
    brokers: int,
    no_demo: bool,
    broker: str | None,
) -> None:
    """Run broker, Redis and every vigil process on this machine, with a demo. Ctrl-C stops all.

    \b
    Example:
      vigil dev --state-dir .vigil/dev
      vigil dev --broker tansu
      vigil dev --brokers 3
    """
    stop = _stop_on_signals()
    state = state_dir.resolve()
    (state / "logs").mkdir(parents=True, exist_ok=True)
    if brokers > 1 and broker == "tansu":
        raise click.BadParameter(
            "a cluster (--brokers > 1) runs Apache Kafka", param_hint="--broker"
        )
    ports = DevPorts.choose(kafka_port, redis_port, brokers)
    servers = Servers(
        state, ports, state / "logs" / "servers.log", "kafka" if brokers > 1 else broker
    )
    guard = Guard(servers.stop_commands(), os.environ)  # stops them if we die uncleanly
    supervisor: Supervisor | None = None
    try:
        _say(f"state in {state}; starting {servers.broker} and redis")
        for line in servers.start():
            _say(line)
        token = new_token()
        config = write_config(state, ports, token, partitions)
        topology = Topology("vigil.", partitions, replication(brokers))
        ensure_topics(connect_admin(ports.bootstrap), topology)
        env = _child_env()
        for stale in addresses(state).values():  # a killed run's would point at old ports
            stale.unlink(missing_ok=True)
        supervisor = Supervisor(services(state, env))
        supervisor.start()
        _wait_up(supervisor, state, stop)
        demo = None if no_demo else _load_demo(config, env, state, stop)
        if not stop.is_set():
            _announce(ports, state, config, token)
            _loop(supervisor, ports, demo, stop)
    except VigilError as exc:
        click.echo(f"vigil dev: {exc}", err=True)
        stop.set()
        raise SystemExit(1) from exc
    finally:
        _say("stopping")
        if supervisor is not None:
            supervisor.stop()
        servers.stop()
        guard.release()
        _say("stopped")


def _stop_on_signals() -> threading.Event:
    """An event SIGINT and SIGTERM set."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def _child_env() -> dict[str, str]:
    """Our environment for the processes, less what would point them at another vigil."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("VIGIL_CONFIG", "VIGIL_SOCKET", "VIGIL_CHAT_ID", "VIGIL_AGENT_TOKEN"):
        env.pop(name, None)
    return env


def _load_demo(config: Path, env: dict[str, str], state: Path, stop: threading.Event) -> Demo:
    """The demo, loaded unless we are already stopping."""
    demo = Demo(config, env, state / "logs" / "demo.log")
    if not stop.is_set():
        demo.load()
    return demo


def _wait_up(supervisor: Supervisor, state: Path, stop: threading.Event) -> None:
    """Until every process answers ``/readyz`` ready (a stage has joined its group and caught
    up; the daemon holds its control grant, so the command processor answers) and the daemon's
    socket exists. Every 15 s a line names what is still starting, and why.

    A first start picks the default ports when free and free ones otherwise; a crashed process is
    restarted with backoff and a status line stays live on stderr.
    """
    deadline = time.monotonic() + _UP_TIMEOUT_S
    next_word = time.monotonic() + _WAITING_EVERY_S
    socket_path = state / "run" / "vigil.sock"
    while not stop.is_set():
        for event in supervisor.poll():
            _say(event)
        waiting = not_ready(state)
        if not waiting and socket_path.exists():
            return
        if not waiting:
            waiting = [f"daemon: no socket at {socket_path} yet"]
        if time.monotonic() > deadline:
            raise VigilError(
                f"processes not ready within {_UP_TIMEOUT_S:g}s ({'; '.join(waiting)}): "
                f"see {state}/logs"
            )
        if time.monotonic() >= next_word:
            next_word = time.monotonic() + _WAITING_EVERY_S
            _say("waiting for " + "; ".join(waiting))
        stop.wait(0.5)


def _announce(ports: DevPorts, state: Path, config: Path, token: str) -> None:
    for name, port in ports.metrics.items():
        _say(f"metrics  {name:18} http://127.0.0.1:{port}/metrics")
    _say(f"api      http://127.0.0.1:{ports.api}  (Authorization: Bearer {token})")
    _say(f"socket   {state / 'run' / 'vigil.sock'}")
    _say(f"broker   {ports.bootstrap}   redis redis://127.0.0.1:{ports.redis}/0")
    _say(f"config   {config}   (export VIGIL_CONFIG={config})")
    _say(f"logs     {state / 'logs'}")
    _say("ready")


def _loop(
    supervisor: Supervisor, ports: DevPorts, demo: Demo | None, stop: threading.Event
) -> None:
    tty = sys.stderr.isatty()
    next_event = time.monotonic() + _EVENT_EVERY_S
    next_status = 0.0
    delivered_seen = False
    last_line = ""
    while not stop.wait(0.5):
        for event in supervisor.poll():
            _say(event)
        now = time.monotonic()
        if demo is not None and now >= next_event:
            next_event = now + _EVENT_EVERY_S
            try:
                demo.publish()
            except VigilError as exc:
                _say(f"demo event not published: {exc}")
        if now < next_status:
            continue
        next_status = now + _STATUS_EVERY_S
        evaluations = metric_total(ports.metrics["evaluator"], "vigil_evaluator_evaluations_total")
        delivered = metric_total(
            ports.metrics["delivery"], "vigil_delivery_results_total", 'result="delivered"'
        )
        if delivered and not delivered_seen:
            delivered_seen = True
            _say("demo notification delivered (see logs/delivery.log)")
        line = (
            f"{supervisor.status()} | evaluations {int(evaluations or 0)} "
            f"delivered {int(delivered or 0)}"
        )
        if tty:
            click.echo(f"\r{line}\x1b[K", nl=False, err=True)
        elif line != last_line:
            click.echo(line, err=True)
        last_line = line
    if tty:
        click.echo("", err=True)
