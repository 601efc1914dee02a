"""The poll ticker stage: due instants of polling watchers, schedules and agent watches;
governed tool calls; ``ticks`` out, exactly once (DESIGN §3, §8, §10)."""
