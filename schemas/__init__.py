"""Avro schemas (``*.avsc``), one file per record type and version; old versions are never
deleted, so readers resolve every writer they may meet."""
