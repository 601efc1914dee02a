"""Command decisions: what one control-plane command does to the registry, pure.

:func:`~pipeline.rules.commands.apply.apply` takes a command, the subject's registry view, the
grants and ``now`` and returns every record the command processor writes in one transaction.
"""
