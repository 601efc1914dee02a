"""Avro schemas (``*.avsc``), one file per record type and version; old versions are never deleted."""
