"""vigil's library under the stages: the pure rules (``rules``), record layouts (``records``), the
Kafka and Redis clients, crypto, configuration, the stream runtime, the control plane and the CLI.

Owns only the layering ``lint-imports`` checks: ``rules`` import no I/O and nothing of vigil,
``records`` only the rules, ``runtime`` no stage, and nothing imports ``cli``. Leaves the stages
to ``consumers`` and ``producers``.
"""
