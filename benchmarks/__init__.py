"""Reproducible benchmarks, one per hot path, each printing one JSON object (ratios to a
baseline measured in the same run)."""
