"""The rules: pure decisions over values and an injected ``now``. No I/O, no clock, no Kafka,
no Redis; nothing of vigil outside this package is imported here (an import-linter contract).
Every parser is total: a value or a named refusal (:class:`~pipeline.rules.errors.DefinitionError`).
"""
