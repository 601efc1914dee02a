"""``vigil publish [FILE|-]``: publish events given as JSON lines (DESIGN.md §9 event shape).

Each non-blank line is one event object. A bad line is reported with its line number; by
default publishing stops there (what came before is still flushed), with ``--skip-invalid``
it goes on. Long inputs get a progress line on stderr; every run ends with
``published N, rejected M`` there, and exits 1 when anything was rejected.

Left out: the checks and the producer (``producers.publish.publisher``).
"""

from __future__ import annotations

import json
import time
from typing import Any, Final, TextIO

import click
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError

from pipeline.cli.context import CliState, pass_state
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import parse_instant
from producers.publish.publisher import EventPublisher

__all__ = ["EventLine", "parse_event_line", "publish"]

_PROGRESS_INTERVAL_S: Final = 1.0


class EventLine(BaseModel):
    """One line of input, as documented in DESIGN.md §9."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_id: StrictStr
    event_type: StrictStr
    event_id: StrictStr
    observed_at: StrictStr
    cursor: StrictStr | None = None
    envelope_id: StrictStr | None = None
    payload: Any = {}


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_event_line(text: str) -> tuple[EventLine, Any]:
    """The validated line and its observed_at instant; :class:`DefinitionError` otherwise."""
    try:
        data = json.loads(text, parse_constant=_no_constants)
    except ValueError as exc:
        raise DefinitionError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DefinitionError("expected a JSON object")
    try:
        line = EventLine.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise DefinitionError(message, field) from None
    return line, parse_instant(line.observed_at, "observed_at")


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
                publisher.publish(
                    line.source_id,
                    line.event_type,
                    line.event_id,
                    line.payload,
                    observed_at,
                    cursor=line.cursor,
                    envelope_id=line.envelope_id,
                )
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
