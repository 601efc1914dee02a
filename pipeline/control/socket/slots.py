"""The control socket's connection slots: at most ``cap`` connections served at once.

Owns :class:`Slots`: a connection is *waiting* or *busy*; past the cap a new one takes the slot of
the longest-waiting one (whose reading end is shut so its thread tells its peer and leaves), and
with every slot busy it is refused. Idle connections never block a request; threads stay bounded.
Left out: reading, answering and counting (``pipeline.control.socket.server``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

__all__ = ["Slots"]


class Slots:
    """Thread-safe."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._waiting: dict[socket.socket, float] = {}
        self._busy: set[socket.socket] = set()
        self._evicted: set[socket.socket] = set()
        self._lock = threading.Lock()

    def admit(self, conn: socket.socket) -> bool:
        """Give ``conn`` a slot, taking the longest-waiting one's past the cap; False when
        every slot is busy."""
        with self._lock:
            if len(self._waiting) + len(self._busy) >= self._cap:
                if not self._waiting:
                    return False
                oldest = min(self._waiting, key=self._waiting.__getitem__)
                del self._waiting[oldest]
                self._evicted.add(oldest)
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RD)  # its thread's read returns: it leaves
            self._waiting[conn] = time.monotonic()
            return True

    def busy(self, conn: socket.socket) -> bool:
        """Mark ``conn`` as answering a request; False when its slot was taken meanwhile."""
        with self._lock:
            if self._waiting.pop(conn, None) is None:
                return False
            self._busy.add(conn)
            return True

    def wait(self, conn: socket.socket) -> None:
        """``conn`` was answered and waits for its next request."""
        with self._lock:
            if conn in self._busy:
                self._busy.discard(conn)
                self._waiting[conn] = time.monotonic()

    def leave(self, conn: socket.socket) -> bool:
        """Free ``conn``'s slot; True when it had lost it to a newer connection."""
        with self._lock:
            self._waiting.pop(conn, None)
            self._busy.discard(conn)
            evicted = conn in self._evicted
            self._evicted.discard(conn)
            return evicted
