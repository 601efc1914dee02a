"""The command processor: the single writer of ``registry``, ``watchers``, ``lifecycle``,
``definition-log``, ``grants`` and ``command-results``, and of ``outbox`` for immediate ``send``
and a prompt's answer (DESIGN.md §2, §10).

A thin loop on the exactly-once :class:`~pipeline.runtime.app.StreamApp`: ``loop`` decodes each
command and asks the pure :func:`pipeline.rules.commands.apply.apply`; ``writes`` writes what it
decided in one transaction with the input offset; ``registry`` indexes each subject's registry
keys; ``metrics`` counts commands by verb and result; ``pipeline.cli.command_processor_cmd`` is
``vigil command-processor``. Left out: every rule (``pipeline.rules.commands.apply``) and
the callers (``pipeline.control``).
"""

from consumers.commands.loop import CommandDeps, CommandProcessor, CommandSettings

__all__ = ["CommandDeps", "CommandProcessor", "CommandSettings"]
