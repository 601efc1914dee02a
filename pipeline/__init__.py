"""vigil's rules, pure: models, conditions, freshness, keys, time, budgets, authz, lifecycle,
evaluation, dispatch and privacy.

Modules directly in this package never import Kafka, Redis or read the wall clock: every
decision is a function of its arguments, with ``now`` passed in. Plumbing lives in the
subpackages (``pipeline.kafka``, ``pipeline.redis``, ``pipeline.control``, ``pipeline.cli``).
"""
