"""What a processor on the stream runtime sees: input records, its context, the hooks it gives.

Owns :class:`InputRecord` (a thin view over the consumed message, so the hot loop copies
nothing it does not use), :class:`ProcessContext` (tables and produce for one task partition,
inside the open transaction), the ``Processor`` and ``Decoder`` shapes, and the dead-letter
headers, and :class:`Placement` (which partition an output key goes to). Leaves out
transactions and assignment (``pipeline.runtime.app``, ``checkpoint``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipeline.kafka.partitioner import partition_for
from pipeline.runtime.tables import Table

__all__ = [
    "Decoder",
    "Headers",
    "InputRecord",
    "Message",
    "Placement",
    "ProcessContext",
    "Processor",
]

Headers = list[tuple[str, str | bytes | None]]


class Message(Protocol):
    """A consumed record as the Kafka client hands it over (confluent-kafka's ``Message``), so
    stages type their decoders without importing the client."""

    def topic(self) -> str | None: ...

    def partition(self) -> int | None: ...

    def offset(self) -> int | None: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> Any: ...

    def timestamp(self) -> tuple[int, int]: ...


class InputRecord:
    """One input record: ``value`` is what ``decode`` returned (the raw bytes without one)."""

    __slots__ = ("_msg", "value")

    def __init__(self, msg: Message, value: Any) -> None:
        self._msg = msg
        self.value = value

    @property
    def topic(self) -> str:
        return self._msg.topic() or ""

    @property
    def partition(self) -> int:
        return self._msg.partition() or 0

    @property
    def offset(self) -> int:
        return self._msg.offset() or 0

    @property
    def key(self) -> bytes | None:
        return self._msg.key()

    @property
    def raw(self) -> bytes | None:
        return self._msg.value()

    @property
    def message(self) -> Message:
        """The consumed message itself (what a dead letter copies)."""
        return self._msg

    @property
    def headers(self) -> Headers:
        found = self._msg.headers()
        if isinstance(found, dict):
            return list(found.items())
        return found or []

    @property
    def timestamp_ms(self) -> int:
        return self._msg.timestamp()[1]

    def __repr__(self) -> str:
        return f"InputRecord({self.topic}[{self.partition}]@{self.offset}, key={self.key!r})"


class Decoder(Protocol):
    """Turns a consumed message into a value; raises ``UnknownSchemaError`` (pause its
    partition if the schema is registered, else dead-letter it) or anything else (dead-letter
    it: ``SerdeError`` says why)."""

    def __call__(self, msg: Message) -> Any: ...


class ProcessContext:
    """What a processor may touch for one task partition, all inside the open transaction."""

    __slots__ = ("_partition_of", "_poll", "_produce", "_table", "partition")

    def __init__(
        self,
        partition: int,
        produce: Callable[..., None],
        poll: Callable[[float], int],
        table: Callable[[str, int], Table],
        partition_of: Callable[[str, bytes | str | None], int],
    ) -> None:
        self.partition = partition
        self._produce = produce
        self._poll = poll
        self._table = table
        self._partition_of = partition_of

    def table(self, name: str) -> Table:
        """The table ``name``: this partition's store, or the whole table for a global one."""
        return self._table(name, self.partition)

    def produce(
        self,
        topic: str,
        key: bytes | str | None,
        value: bytes | str | None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Write a record in the transaction; the partition defaults to Java's for the key."""
        if partition is None:
            partition = self._partition_of(topic, key)
        try:
            if headers is None:
                self._produce(topic, value, key, partition)
            else:
                self._produce(topic, value, key, partition, headers=headers)
        except BufferError:  # librdkafka's queue is full: let it drain, then once more
            self._poll(0.5)
            self._produce(topic, value, key, partition, headers=headers)


Processor = Callable[[list[InputRecord], ProcessContext], None]


class Placement:
    """Java's partition for a key, with each topic's partition count looked up once."""

    __slots__ = ("_counts", "_lookup")

    def __init__(self, lookup: Callable[[str], int]) -> None:
        self._lookup = lookup
        self._counts: dict[str, int] = {}

    def count(self, topic: str) -> int:
        found = self._counts.get(topic)
        if found is None:
            found = self._counts[topic] = self._lookup(topic)
        return found

    def partition_of(self, topic: str, key: bytes | str | None) -> int:
        if not key:
            return -1  # librdkafka picks one: a keyless record has no home partition
        return partition_for(key, self.count(topic))
