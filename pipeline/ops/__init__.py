"""Operating vigil: reading history back, and running everything on one machine.

Public modules: :mod:`pipeline.kafka.scan` (bounded, read-committed topic scans with a progress
line), :mod:`pipeline.ops.replay_reader` (a :class:`~pipeline.rules.replay.History` from the
topics),
:mod:`pipeline.ops.explain` (one watcher's evaluations joined with their delivery state),
:mod:`pipeline.ops.supervisor` (a restarting process group) and :mod:`pipeline.ops.dev_stack`
(what ``vigil dev`` starts). The rules replay applies are ``pipeline.rules.replay``'s; the command
line is ``pipeline.cli``'s.
"""

__all__: list[str] = []
