"""Kafka plumbing shared by every process: topic specs, serde, partitioner, the stream runtime."""
