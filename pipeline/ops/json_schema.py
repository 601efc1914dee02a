"""The JSON Schemas ``vigil schema`` prints and ``docs/schemas/`` holds: a watcher definition
(``pipeline.rules.definition_schema``) and an event line (``pipeline.ops.validate.EventLine``).

Left out: the rules a schema cannot say (bounds across fields, credentials, freshness):
``vigil watch validate`` and ``vigil publish --dry-run`` check those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from pipeline.ops.validate import EventLine
from pipeline.rules.definition_schema import watcher_schema

__all__ = ["SCHEMAS", "event_schema"]


def event_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of one event as ``vigil publish`` reads it."""
    schema = EventLine.model_json_schema()
    schema.pop("description", None)
    properties = schema["properties"]
    properties["observed_at"].update(
        format="date-time", description="RFC 3339 with an offset; judged fresh per watcher."
    )
    for name in ("source_id", "event_type", "event_id", "envelope_id"):
        properties[name]["description"] = "At most 256 bytes."
    properties["cursor"]["description"] = "At most 1 KiB; audit only."
    properties["payload"]["description"] = "JSON that RFC 8785 can write; at most 512 KiB."
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Event",
        "description": "One event, one JSON object per line (docs/definitions.md#events).",
        **{k: v for k, v in schema.items() if k != "title"},
    }


SCHEMAS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "watcher": watcher_schema,
    "event": event_schema,
}
"""What ``vigil schema NAME`` prints, by name; ``docs/schemas/NAME.json`` is each one's output."""
