"""The ``vigil`` command: entry points, configuration loading and the metrics server."""
