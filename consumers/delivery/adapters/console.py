"""The ``console`` chat: prints a delivery's text to stdout, for ``vigil dev`` and local use.

The same text a Telegram-shaped chat would get
(:func:`~consumers.delivery.adapters.base.message_text`), one delivery per block, flushed at
once. Like any chat it takes no idempotency key, so its results say ``repeat_risk``.

Left out: colour, paging and anything interactive.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from consumers.delivery.adapters.base import AdapterKind, SendResult, message_text
from pipeline.clock import Clock, SystemClock
from pipeline.rules.message import Channel
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["ConsoleAdapter"]


class ConsoleAdapter:
    kind = AdapterKind.CONSOLE

    def __init__(self, stream: TextIO | None = None, *, clock: Clock | None = None) -> None:
        self._stream = stream
        self._clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()  # one delivery's lines never interleave with another's

    def send(self, entry: OutboxEntry) -> SendResult:
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            with self._lock:
                stream.write(message_text(entry, Channel.CHAT, self._clock.now()) + "\n")
                stream.flush()
        except (OSError, ValueError):  # closed or broken stdout
            return SendResult.failed(ErrorCode.UNAVAILABLE, repeat_risk=True)
        return SendResult.delivered(repeat_risk=True)

    def close(self) -> None:
        """Nothing to release: the stream belongs to the caller."""
