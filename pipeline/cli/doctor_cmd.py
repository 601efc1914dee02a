"""``vigil doctor``: check this deployment and print a table (or ``--json``); exit 0 only when
every check passes (69 when the broker or Redis does not answer, else 1).

Left out: the checks (``pipeline.ops.doctor``).
"""

from __future__ import annotations

import json

import click

from pipeline.cli.context import CliState, pass_state
from pipeline.ops.doctor import Finding, diagnose, worst

__all__ = ["doctor"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@pass_state
def doctor(state: CliState, as_json: bool) -> None:
    """Check the configuration, broker, Redis, topics, processes and clock.

    Exit 0 only when every check passes; 69 when the broker or Redis does not answer.

    \b
    Example:
      vigil doctor --json
    """
    findings = diagnose(state.config, config_path=state.config_path)
    code = worst(findings)
    if as_json:
        body = {"ok": code == 0, "checks": [f.as_json() for f in findings]}
        click.echo(json.dumps(body, indent=2))
    else:
        click.echo(_table(findings))
    raise click.exceptions.Exit(code)


def _table(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = [f"{'CHECK':<{width}}  STATUS  DETAIL"]
    lines += [f"{f.check:<{width}}  {f.status.value:<6}  {f.detail}" for f in findings]
    return "\n".join(lines)
