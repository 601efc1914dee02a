"""Answers one question for kafka.sh: does a Kafka broker answer a metadata request at HOST:PORT?

Exit 0 when it does (at least one broker listed), 1 when it does not within the timeout,
3 when confluent-kafka is not importable. Owns nothing else: starting and stopping brokers
is kafka.sh's job.
"""

from __future__ import annotations

import sys

__all__ = ["answers"]


def answers(bootstrap: str, timeout: float) -> bool:
    """True when the broker lists itself in a metadata response within ``timeout`` seconds."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # log_level 0: no "connection refused" chatter on stderr while the broker boots.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return len(metadata.brokers) > 0


def main(argv: list[str]) -> int:
    bootstrap = argv[1] if len(argv) > 1 else "127.0.0.1:9092"
    timeout = float(argv[2]) if len(argv) > 2 else 2.0
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        print("confluent-kafka is not importable: run `make venv` first", file=sys.stderr)
        return 3
    return 0 if answers(bootstrap, timeout) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
