"""``vigil keys``: the operator's key-encryption keys (DESIGN §10 "Erasure's reach").

``vigil keys generate [--id ID]`` prints one fresh ``ID:KEY`` entry for ``[privacy]
master_key_env`` (``$VIGIL_MASTER_KEYS`` by default): set it for every vigil process and CLI,
and to rotate, append a new entry (new data keys, and old ones the command processor touches,
are wrapped under the last one). ``vigil keys check`` says which KEK ids the configuration
gives, never the keys. Left out: data keys and wrapping (``pipeline.crypto``).
"""

from __future__ import annotations

import json

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.crypto import generate_kek_text

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """Key-encryption keys: generate one, or check what is configured.

    Example: export VIGIL_MASTER_KEYS="$(vigil keys generate)"
    """


@keys.command()
@click.option("--id", "kek_id", help="The key's id (default: kek-<date>-<random>).")
def generate(kek_id: str | None) -> None:
    """Print a new ID:KEY entry (32 random bytes, URL-safe base64).

    \b
    Example:
      export VIGIL_MASTER_KEYS="$(vigil keys generate)"
      export VIGIL_MASTER_KEYS="$VIGIL_MASTER_KEYS,$(vigil keys generate)"   # rotate
    """
    click.echo(generate_kek_text(kek_id))


@keys.command()
@click.option("--json", "as_json", is_flag=True, help="Print the ids as JSON.")
@pass_state
def check(state: CliState, as_json: bool) -> None:
    """Print the configured KEK ids, newest last (never the keys).

    \b
    Example:
      vigil keys check
    """
    keks = state.config.privacy.keks()
    if as_json:
        click.echo(json.dumps({"ids": list(keks.ids), "newest": keks.newest}))
        return
    click.echo(f"key-encryption keys: {', '.join(keks.ids)} (new wraps use {keks.newest})")
