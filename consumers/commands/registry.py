"""Which ``registry`` keys belong to a subject, per task partition: the view a command needs.

A command reads only its subject's watchers; scanning a whole partition per command would cost
O(watchers on the partition). :class:`SubjectIndex` maps each subject key to its watcher keys,
built once per restored table (a rebalance or a producer rebuild gives a new table object, which
is rebuilt from scratch) and kept up to date on writes. It is a superset that an aborted
transaction's rollback cannot make wrong: readers check each key against the table, and a key is
dropped only once it is gone from the table and untouched by the open transaction (which alone
a rollback could bring back) — so forgotten watchers (expired proposals, erasure) leave it and
it stays as large as the table.

Left out: decoding entries and deciding anything (``processor``, ``pipeline.rules.commands.apply``).
"""

from __future__ import annotations

from pipeline.rules.keys import subject_of
from pipeline.runtime.tables import Table

__all__ = ["SubjectIndex"]


class SubjectIndex:
    """Subject key → registry keys, for each task partition's table."""

    def __init__(self) -> None:
        self._by_partition: dict[int, tuple[Table, dict[str, set[str]]]] = {}

    def keys(self, table: Table, subject_key: str) -> list[str]:
        """The subject's keys present in ``table`` now, sorted (dropping the gone ones)."""
        index = self._index(table)
        known = index.get(subject_key)
        if not known:
            return []
        gone = {k for k in known if k not in table.data and k not in table.undo}
        known -= gone
        if not known:
            del index[subject_key]
        return sorted(k for k in known if k in table.data)

    def add(self, table: Table, watcher_key: str) -> None:
        """Note a key written to ``table`` (deletes need no note: readers check presence)."""
        self._index(table).setdefault(subject_of(watcher_key), set()).add(watcher_key)

    def _index(self, table: Table) -> dict[str, set[str]]:
        found = self._by_partition.get(table.partition)
        if found is not None and found[0] is table:
            return found[1]
        index: dict[str, set[str]] = {}
        for key in table.data:
            index.setdefault(subject_of(key), set()).add(key)
        self._by_partition[table.partition] = (table, index)
        return index
