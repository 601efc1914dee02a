"""Which ``registry`` keys belong to a subject, per task partition: the view a command needs.

Owns :class:`SubjectIndex`: subject key → watcher keys, a superset a rollback cannot make wrong
(readers check each key against the table), and each subject's decoded view, updated in place
by the identity of the table's bytes. Leaves out decoding an entry (the processor's decoder)
and deciding anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pipeline.rules.commands import RegistryEntry
from pipeline.rules.keys import subject_of
from pipeline.runtime.tables import Table

__all__ = ["SubjectIndex"]


@dataclass(slots=True)
class _Held:
    """One subject's decoded entries: registry key → (the raw value, its entry or None when it
    no longer opens), and the view they make (watcher id → entry)."""

    entries: dict[str, tuple[bytes, RegistryEntry | None]] = field(default_factory=dict)
    view: dict[str, RegistryEntry] = field(default_factory=dict)


class SubjectIndex:
    """Subject key → registry keys (and their decoded view), for each task partition's table.

    Built once per restored table (a rebalance or a producer rebuild gives a new table object, which
    is rebuilt from scratch) and kept up to date on writes. A key is dropped only once it is gone
    from the table and untouched by the open transaction (which alone a rollback could bring back),
    so forgotten watchers (expired proposals, erasure) leave it and it stays as large as the table.

    :meth:`view` is the subject's decoded view kept incrementally: each entry is held with the very
    bytes object it was decoded from, and a command's view re-decodes only the keys whose value in
    the table is no longer that object. The view is the same dict from command to command, updated
    in place; :func:`pipeline.rules.commands.apply.apply` only reads it.
    """

    def __init__(self) -> None:
        self._by_partition: dict[int, tuple[Table, dict[str, set[str]]]] = {}
        self._held: dict[int, tuple[Table, dict[str, _Held]]] = {}

    def view(
        self,
        table: Table,
        subject_key: str,
        decode: Callable[[bytes], RegistryEntry | None],
    ) -> Mapping[str, RegistryEntry]:
        """The subject's watchers by id as ``table`` holds them now; ``decode`` (None: the
        entry no longer opens, left out) runs only for values not seen before."""
        index = self._index(table)
        held_by_subject = self._held_for(table)
        known = index.get(subject_key)
        if not known:
            held_by_subject.pop(subject_key, None)
            return {}
        held = held_by_subject.setdefault(subject_key, _Held())
        entries, view = held.entries, held.view
        data, undo = table.data, table.undo
        gone: list[str] = []
        for key in known:
            raw = data.get(key)
            before = entries.get(key)
            if before is not None and before[0] is raw:
                continue
            if before is not None:
                del entries[key]
                if before[1] is not None:
                    view.pop(before[1].watcher_id, None)
            if raw is None:
                if key not in undo:  # gone for good: no rollback can bring it back
                    gone.append(key)
                continue
            entry = decode(raw)
            entries[key] = (raw, entry)
            if entry is not None:
                view[entry.watcher_id] = entry
        if gone:
            known.difference_update(gone)
            if not known:
                del index[subject_key]
                del held_by_subject[subject_key]
                return {}
        return view

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

    def _held_for(self, table: Table) -> dict[str, _Held]:
        found = self._held.get(table.partition)
        if found is not None and found[0] is table:
            return found[1]
        held: dict[str, _Held] = {}
        self._held[table.partition] = (table, held)
        return held

    def _index(self, table: Table) -> dict[str, set[str]]:
        found = self._by_partition.get(table.partition)
        if found is not None and found[0] is table:
            return found[1]
        index: dict[str, set[str]] = {}
        for key in table.data:
            index.setdefault(subject_of(key), set()).add(key)
        self._by_partition[table.partition] = (table, index)
        return index
