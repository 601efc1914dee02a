"""``vigil publish [FILE|-]``: publish events given as JSON lines (DESIGN.md §9 event shape).

Each non-blank line is one event object. A bad line is reported with its line number; by
default publishing stops there (what came before is still flushed), with ``--skip-invalid``
it goes on. Long inputs get a progress line on stderr; every run ends with
``published N, rejected M`` there, and exits 1 when anything was rejected.

Left out: the checks and the producer (``producers.publish.publisher``).
"""

from __future__ import annotations

import time
from typing import Final, TextIO

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.records.event import EventLine, parse_event_line
from pipeline.rules.errors import DefinitionError
from producers.publish.publisher import EventPublisher

__all__ = ["EventLine", "parse_event_line", "publish"]

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


@click.command()
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option("--skip-invalid", is_flag=True, help="Report bad lines and go on.")
@click.option(
    "--progress-every",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Lines between progress lines (one is also printed every second).",
)
@pass_state
def publish(state: CliState, source: TextIO, skip_invalid: bool, progress_every: int) -> None:
    """Publish events from FILE (or stdin), one JSON object per line."""
    progress = _Progress(progress_every)
    seen = rejected = 0
    state.reach_kafka()
    publisher = EventPublisher(state.config)
    try:
        for number, text in enumerate(source, start=1):
            if not text.strip():
                continue
            seen += 1
            try:
                line, observed_at = parse_event_line(text)
                publisher.publish_line(line, observed_at)
            except DefinitionError as exc:
                rejected += 1
                click.echo(f"line {number}: {exc}", err=True)
                if not skip_invalid:
                    click.echo("stopping (use --skip-invalid to go on past bad lines)", err=True)
                    break
            progress.tick(seen, rejected)
        publisher.flush()
    finally:
        click.echo(f"published {publisher.delivered}, rejected {rejected}", err=True)
    if rejected:
        raise click.exceptions.Exit(1)
