"""The command processor: the single writer of ``registry``, ``watchers``, ``lifecycle``,
``definition-log``, ``grants`` and ``command-results`` (and ``outbox`` for an immediate ``send``).

``loop`` decodes each command and asks the pure :func:`pipeline.rules.commands.apply.apply`,
``writes`` writes what it decided in the transaction with the input offset, ``registry`` indexes
each subject's keys. Leaves out every rule and the callers (``pipeline.control``).
"""

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings

__all__ = ["CommandDeps", "CommandProcessor", "CommandSettings"]
