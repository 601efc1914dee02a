"""A toy processor on the stream runtime: counts per key into a changelogged table.

For each input record (key = counter key, value = a unique input id) it adds one to the key's
count in the owned table ``counts`` and emits ``<input id>:<count>`` under the same key to the
output topic. Run as a subprocess so tests can kill it with SIGKILL::

    python -m tests.integration.toy_counter --bootstrap B --inputs a,b --output o \\
        --changelog c --group g --instance i [--static]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from pipeline.cli import shutdown
from pipeline.runtime.app import InputRecord, ProcessContext, Processor, StreamApp
from pipeline.runtime.tables import TableKind, TableSpec

__all__ = ["count_processor", "main", "make_app"]


def count_processor(output: str) -> Processor:
    def process(batch: list[InputRecord], ctx: ProcessContext) -> None:
        counts = ctx.table("counts")
        for record in batch:
            key = (record.key or b"").decode()
            count = int(counts.get(key) or b"0") + 1
            counts.set(key, str(count).encode())
            ctx.produce(output, key, b"%s:%d" % (record.value, count))

    return process


def make_app(
    bootstrap: str,
    inputs: list[str],
    output: str,
    changelog: str,
    group: str,
    instance: str,
    *,
    static: bool = False,
    **kwargs: Any,
) -> StreamApp:
    return StreamApp(
        bootstrap,
        group,
        instance,
        inputs,
        count_processor(output),
        tables=[TableSpec("counts", changelog, TableKind.OWNED)],
        static_membership=static,
        consumer_overrides={"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        **kwargs,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--changelog", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--instance", required=True)
    parser.add_argument("--static", action="store_true")
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s toy %(levelname)s %(message)s")
    stop = shutdown.catch()
    app = make_app(
        args.bootstrap,
        args.inputs.split(","),
        args.output,
        args.changelog,
        args.group,
        args.instance,
        static=args.static,
        commit_interval_ms=args.commit_interval_ms,
    )
    app.run(stop)


if __name__ == "__main__":
    main()
