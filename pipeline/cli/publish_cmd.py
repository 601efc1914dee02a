"""``vigil publish [FILE|-]``: publish events given as JSON lines (docs/definitions.md#events).

A bad line is reported as ``FILE:line:col: field: message`` and stops publishing (``--skip-invalid``
goes on); an ``observed_at`` outside the knowable freshness window warns; ``--dry-run`` needs no
broker. Ends with ``published N, rejected M`` (exit 1 on any rejection); leader moves are waited out
up to ``--timeout``; events carry ``[subject] tenant_id``. Left out: the checks
(``pipeline.ops.validate``) and the producer (``producers.publish``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Final, TextIO

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.kafka.failover import FAILOVER_WAIT_S
from pipeline.ops.validate import check_event_line
from pipeline.rules.durations import parse_duration
from pipeline.rules.errors import DefinitionError
from producers.publish.publisher import EventPublisher

__all__ = ["publish"]

_PROGRESS_INTERVAL_S: Final = 1.0


class _Progress:
    """A progress line every ``every`` records or every second, whichever comes first."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.started = self.last = time.monotonic()

    def tick(self, seen: int, rejected: int) -> None:
        now = time.monotonic()
        if seen % self.every and now - self.last < _PROGRESS_INTERVAL_S:
            return
        self.last = now
        rate = seen / max(now - self.started, 1e-9)
        click.echo(f"read {seen} lines, rejected {rejected} ({rate:,.0f} lines/s)", err=True)


def _max_age(_ctx: click.Context, _param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value, "--max-age")
    except DefinitionError as exc:
        raise click.BadParameter(exc.message) from None


@click.command()
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option("--skip-invalid", is_flag=True, help="Report bad lines and go on.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Check every line (problems and warnings) and publish nothing; needs no broker.",
)
@click.option(
    "--max-age",
    callback=_max_age,
    metavar="DURATION",
    help="Warn about events older than this (your watchers' max_age, e.g. 10m).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=FAILOVER_WAIT_S,
    show_default=True,
    metavar="SECONDS",
    help="How long an event may wait for the cluster (a leader moving) before publishing fails.",
)
@click.option(
    "--progress-every",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Lines between progress lines (one is also printed every second).",
)
@pass_state
def publish(
    state: CliState,
    source: TextIO,
    skip_invalid: bool,
    dry_run: bool,
    max_age: timedelta | None,
    timeout: float,
    progress_every: int,
) -> None:
    """Publish events from FILE (or stdin), one JSON object per line.

    \b
    Example:
      vigil publish --dry-run --max-age 10m examples/events.jsonl
    """
    name = "<stdin>" if source.name in ("-", "<stdin>") else source.name
    progress = _Progress(progress_every)
    seen = rejected = published = 0
    if not dry_run:
        state.reach_kafka()
    tenant = state.config.subject.tenant_id  # what every event carries (never the payload's)
    publisher = (
        None if dry_run else EventPublisher(state.config, tenant_id=tenant, timeout_s=timeout)
    )
    try:
        for number, text in enumerate(source, start=1):
            if not text.strip():
                continue
            seen += 1
            now = datetime.now(UTC)
            findings, event = check_event_line(text, name, number, now=now, max_age=max_age)
            for finding in findings:
                click.echo(str(finding), err=True)
            if event is None:
                rejected += 1
                if not skip_invalid and not dry_run:
                    click.echo("stopping (use --skip-invalid to go on past bad lines)", err=True)
                    break
            elif publisher is not None:
                line, observed_at = event
                try:
                    publisher.publish_line(line, observed_at)
                except DefinitionError as exc:
                    rejected += 1
                    click.echo(f"{name}:{number}:1: {exc}", err=True)
                    if not skip_invalid:
                        break
            else:
                published += 1
            progress.tick(seen, rejected)
        if publisher is not None:
            publisher.flush()
    finally:
        if publisher is None:
            click.echo(f"checked {seen}: {published} valid, rejected {rejected}", err=True)
        else:
            click.echo(f"published {publisher.delivered}, rejected {rejected}", err=True)
    if rejected:
        raise click.exceptions.Exit(1)
