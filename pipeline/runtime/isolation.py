"""Finding the one record whose processing fails, so that it alone is dead-lettered.

Owns :class:`Isolation`: after a processor raised, the failed batch's records are replayed one
per transaction; one that fails alone is dead-lettered, the others commit, and batches resume
once every partition is past its mark. Leaves out the transactions (``transactions``) and what
a dead letter carries (``poison``).
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import TopicPartition

__all__ = ["Isolation", "failure_reason"]

_MAX_MESSAGE = 500


def failure_reason(exc: BaseException) -> str:
    """A dead letter's reason for a processing failure: the exception's type and message."""
    message = str(exc)
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "…"
    return f"processing failed: {type(exc).__name__}: {message}"


class Isolation:
    """Partitions being replayed one record per transaction, each up to the last offset of the
    batch that failed there."""

    __slots__ = ("_marks",)

    def __init__(self) -> None:
        self._marks: dict[tuple[str, int], int] = {}

    @property
    def active(self) -> bool:
        return bool(self._marks)

    def enter(self, last_offsets: dict[tuple[str, int], int]) -> None:
        """Replay these partitions one record at a time, up to and including the offsets."""
        for where, offset in last_offsets.items():
            self._marks[where] = max(offset, self._marks.get(where, -1))

    def passed(self, topic: str, partition: int, offset: int) -> None:
        """The record at ``offset`` is settled (committed or dead-lettered)."""
        mark = self._marks.get((topic, partition))
        if mark is not None and offset >= mark:
            del self._marks[(topic, partition)]

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions revoked or lost: whoever holds them next finds the record again."""
        for tp in partitions:
            self._marks.pop((tp.topic, tp.partition), None)

    def clear(self) -> None:
        self._marks.clear()
