"""The tables a stream app member holds: per task partition, and whole (global) ones.

Owns which :class:`~pipeline.runtime.tables.Table` stores exist for the partitions assigned now,
building and restoring them on assignment, dropping them on revoke or loss; global tables are
made (empty) with the state and loaded once at start. Stages find them by name (``table``,
``whole``, ``stores_of``). Leaves reading topics to
:class:`~pipeline.runtime.tables.TableReader` and transactions to ``transactions``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from pipeline.rules.errors import BrokerError
from pipeline.runtime.tables import Table, TableKind, TableReader, TableSpec

__all__ = ["TaskState"]


class TaskState:
    """Stores keyed by (table name, partition), plus one store per global table."""

    def __init__(
        self,
        specs: Iterable[TableSpec],
        reader: TableReader,
        partition_count: Callable[[str], int],
    ) -> None:
        self.specs = {spec.name: spec for spec in specs}
        self.reader = reader
        self._partition_count = partition_count
        self._stores: dict[tuple[str, int], Table] = {}
        # Global tables exist from the start (empty until loaded), so views can be built on
        # them before any network call; ``_loaded`` says which were read.
        self._globals = {
            spec.name: Table(spec, -1)
            for spec in self.specs.values()
            if spec.kind is TableKind.GLOBAL
        }
        self._loaded: set[str] = set()

    def stores(self) -> Iterable[Table]:
        """The per-partition stores (owned and external) held now."""
        return self._stores.values()

    def __iter__(self) -> Iterator[Table]:
        yield from self._stores.values()
        yield from self._globals.values()

    def table(self, name: str, partition: int) -> Table:
        """The store of ``name`` for ``partition``; a global table is whole for every one."""
        found = self._globals.get(name)  # not ``or``: an empty table is falsy
        if found is None:
            found = self._stores.get((name, partition))
        if found is None:
            raise BrokerError(f"no table {name!r} for partition {partition}")
        return found

    def whole(self, name: str) -> Table:
        """A global table (``grants``, ``lifecycle``, ``keys``), loaded at start."""
        return self.table(name, -1)

    def stores_of(self, name: str) -> dict[int, Table]:
        """The per-partition stores of table ``name`` held now, by partition (they change on
        a restore: compare them by identity)."""
        return {p: t for (n, p), t in self._stores.items() if n == name}

    def restore(self, numbers: set[int]) -> dict[int, dict[str, int]]:
        """Build and fill the co-partitioned tables of ``numbers``; tail the external ones.

        Returns the input positions the owned changelogs reflect, per partition.
        """
        fresh: dict[tuple[str, int], Table] = {}
        for spec in self.specs.values():
            if spec.kind is TableKind.GLOBAL:
                continue
            for p in numbers:
                table = Table(spec, p)
                self._stores[(spec.name, p)] = table
                fresh[(spec.topic, p)] = table
        reflected = self.reader.restore(fresh)
        self.reader.tail({tp: t for tp, t in fresh.items() if t.spec.kind is TableKind.EXTERNAL})
        return reflected

    def drop(self, numbers: set[int]) -> None:
        gone = [key for key in self._stores if key[1] in numbers]
        external = [
            (self._stores[key].spec.topic, key[1])
            for key in gone
            if self._stores[key].spec.kind is TableKind.EXTERNAL
        ]
        for key in gone:
            del self._stores[key]
        if external:
            self.reader.untail(external)

    def load_globals(self) -> None:
        """Read every global table whole, then keep tailing it."""
        for name, table in self._globals.items():
            if name in self._loaded:
                continue
            spec = table.spec
            mapping = {(spec.topic, p): table for p in range(self._partition_count(spec.topic))}
            self.reader.restore(mapping)
            self.reader.tail(mapping)
            self._loaded.add(name)  # after: a start that failed half-way reads it again

    def catch_up(self) -> None:
        self.reader.catch_up()

    def close(self) -> None:
        self.reader.close()
