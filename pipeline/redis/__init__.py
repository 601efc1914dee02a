"""Redis access: per-window budget counters (one Lua script per check) and nothing else."""
