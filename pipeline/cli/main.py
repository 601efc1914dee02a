"""The ``vigil`` executable's first steps, and the table of its subcommands.

A service told to stop while it is still importing must still stop cleanly, so :func:`main`
hardens the process and arms the stop handler before the command group and its configuration
load (half a second of imports); this module imports nothing else of weight. Owns
:data:`COMMANDS` (``"name": "module:attribute"``); the group itself is ``pipeline.cli.group``."""

from __future__ import annotations

import sys
from typing import Final

from pipeline.cli import shutdown
from pipeline.control.hardening import harden

__all__ = ["COMMANDS", "main"]

COMMANDS: Final[dict[str, str]] = {
    "publish": "pipeline.cli.publish_cmd:publish",
    "topics": "pipeline.cli.topics_cmd:topics",
    "watch": "pipeline.cli.watch_cmd:watch",
    "grant": "pipeline.cli.grant_cmd:grant",
    "erase": "pipeline.cli.erase_cmd:erase",
    "export": "pipeline.cli.export_cmd:export",
    "import": "pipeline.cli.import_cmd:import_cmd",
    "command-processor": "pipeline.cli.command_processor_cmd:command_processor",
    "delivery": "pipeline.cli.delivery_cmd:delivery",
    "evaluator": "pipeline.cli.evaluator_cmd:evaluator",
    "ticker": "pipeline.cli.ticker_cmd:ticker",
    "daemon": "pipeline.cli.daemon_cmd:daemon",
    "send": "pipeline.cli.verbs_cmd:send",
    "prompt": "pipeline.cli.verbs_cmd:prompt",
    "query": "pipeline.cli.verbs_cmd:query",
    "run": "pipeline.cli.verbs_cmd:run",
    "schedule": "pipeline.cli.verbs_cmd:schedule",
    "list": "pipeline.cli.verbs_cmd:list_schedules",
    "cancel": "pipeline.cli.verbs_cmd:cancel",
    "api": "pipeline.cli.api_cmd:api",
    "mcp": "pipeline.cli.api_cmd:mcp",
    "replay": "pipeline.cli.replay_cmd:replay_command",
    "explain": "pipeline.cli.explain_cmd:explain",
    "deliveries": "pipeline.cli.deliveries_cmd:deliveries",
    "dev": "pipeline.cli.dev_cmd:dev",
    "keys": "pipeline.cli.keys_cmd:keys",
    "doctor": "pipeline.cli.doctor_cmd:doctor",
    "schema": "pipeline.cli.schema_cmd:schema",
    "completion": "pipeline.cli.completion_cmd:completion",
}


def main() -> None:
    harden()  # first: non-dumpable before anything reads a secret (DESIGN.md §10)
    shutdown.arm(sys.argv[1:], tuple(COMMANDS))
    from pipeline.cli.group import vigil  # the slow imports, after the handler is armed

    vigil(prog_name="vigil")


if __name__ == "__main__":
    main()
