"""Where a watcher's receipts are, known before ``show`` answers: its source id as a page last saw
it.

Owns :class:`KnownSources`, a bounded map of (tenant, user, watcher id) → source id. A hint only: a
read started from it is used when ``show`` answers the same source, else read again. Left out: the
reads (``http.backend``) and the pages (``pages``)."""

from __future__ import annotations

import threading
from typing import Any, Final

__all__ = ["KnownSources"]

_SIZE: Final = 65_536


class KnownSources:
    """The source id of each watcher a page has shown, by (tenant, user, watcher id), at most
    ``size`` (oldest out first): a hint only — where a watcher page may start reading its
    receipts before ``show`` answers; the answer's source decides what is shown."""

    def __init__(self, size: int = _SIZE) -> None:
        self._size = size
        self._known: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> str | None:
        return self._known.get(key)

    def remember(self, tenant_id: str, user_id: str, view: dict[str, Any]) -> None:
        watcher_id, source_id = view.get("watcher_id"), view.get("source_id")
        if not isinstance(watcher_id, str) or not isinstance(source_id, str):
            return
        with self._lock:
            self._known.pop((tenant_id, user_id, watcher_id), None)
            self._known[(tenant_id, user_id, watcher_id)] = source_id
            while len(self._known) > self._size:
                del self._known[next(iter(self._known))]
