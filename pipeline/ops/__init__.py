"""Operating vigil: reading history back, diagnosing, and running everything on one machine.

Modules: ``replay_reader`` and ``replay_apply`` (replay's reads and recovery writes), ``explain``,
``doctor``, ``health`` (each process's probes), ``validate`` and ``json_schema`` (offline checks),
and ``vigil dev``'s ``dev_stack``, ``dev_servers``, ``supervisor`` and ``guard``. The replay rules
are ``pipeline.rules.replay``'s; the command line is ``pipeline.cli``'s."""

__all__: list[str] = []
