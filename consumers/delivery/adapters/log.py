"""The ``log`` destination: one JSON line per delivery on stdout (or an injected stream).

The line is the webhook body (:func:`~consumers.delivery.adapters.base.body_object`) plus ``verb``
and ``target``, as RFC 8785 canonical JSON, so a log shipper sees what a webhook would and can
dedupe on ``delivery_key``; its ``message`` is escaped for a log (one line).

Left out: the process's own diagnostic logging (``logging``), which never carries deliveries.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from consumers.delivery.adapters.base import AdapterKind, SendResult, body_object, message_text
from pipeline.rules.errors import DefinitionError
from pipeline.rules.keys import canonical_json
from pipeline.rules.message import Channel
from pipeline.rules.outbox import OutboxEntry
from pipeline.rules.outcomes import ErrorCode

__all__ = ["LogAdapter", "log_line"]


def log_line(entry: OutboxEntry) -> str:
    """The JSON line for ``delivery``, without the newline."""
    record = body_object(entry) | {
        "verb": entry.verb,
        "target": entry.target,
        "message": message_text(entry, Channel.LOG),
    }
    return canonical_json(record, "delivery").decode("utf-8")


class LogAdapter:
    kind = AdapterKind.LOG

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()  # whole lines only, whatever the thread pool does

    def send(self, entry: OutboxEntry) -> SendResult:
        try:
            line = log_line(entry)
        except DefinitionError:
            return SendResult.failed(ErrorCode.REJECTED)
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            with self._lock:
                stream.write(line + "\n")
                stream.flush()
        except (OSError, ValueError):  # closed or broken stdout
            return SendResult.failed(ErrorCode.UNAVAILABLE)
        return SendResult.delivered()

    def close(self) -> None:
        """Nothing to release: the stream belongs to the caller."""
