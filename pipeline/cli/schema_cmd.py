"""``vigil schema watcher|event``: print a JSON Schema generated from vigil's models.

Left out: the schemas themselves (``pipeline.ops.json_schema``).
"""

from __future__ import annotations

import json

import click

from pipeline.ops.json_schema import SCHEMAS

__all__ = ["schema"]


@click.command()
@click.argument("name", type=click.Choice(sorted(SCHEMAS)))
def schema(name: str) -> None:
    """Print the JSON Schema (2020-12) of a watcher definition or an event line; editors and
    CI can check files with it (docs/schemas/ holds the same).

    \b
    Example:
      vigil schema watcher > watcher.schema.json
    """
    click.echo(json.dumps(SCHEMAS[name](), indent=2, sort_keys=True))
