"""The poll ticker's decoded views of the tables it holds: watchers, memories, the agenda.

Owns :class:`TickerViews`: per task partition ``watchers`` (external) and ``ticker-state``
(owned) decoded into watchers, their home partition, the ticker's memory of each, the
:class:`~producers.ticker.agenda.Agenda` and the keys to tombstone; rebuilt when the runtime
replaces the tables. Leaves out planning and writing (``loop``) and the record layouts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from pipeline.kafka.serde import AvroCodec
from pipeline.records.sealing import Sealer
from pipeline.records.ticker_state import decode_ticker_state
from pipeline.records.watcher import Watch, decode_watch
from pipeline.rules.errors import SerdeError
from pipeline.rules.ticker import TickerMemory
from pipeline.runtime.tables import Table, TableKind
from pipeline.runtime.views import TableView
from producers.ticker.agenda import Agenda

__all__ = ["STATE", "WATCHERS", "TickerViews"]

log = logging.getLogger(__name__)

WATCHERS: Final = "watchers"
STATE: Final = "ticker-state"
_ASAP: Final = datetime(1970, 1, 1, tzinfo=UTC)


class TickerViews:
    """What the ticker knows about the partitions it holds now.

    Rebuilt whenever the runtime replaces the tables (assignment, restore, an aborted transaction);
    otherwise refreshed with only the ``watchers`` keys that changed.
    """

    def __init__(self, codec: AvroCodec, sealer: Sealer) -> None:
        self.codec = codec
        self.sealer = sealer
        self._signature: tuple[tuple[str, int, int], ...] = ()
        self.watchers: dict[int, Table] = {}
        self.state: dict[int, Table] = {}
        self.watch: dict[str, Watch] = {}
        self.partition: dict[str, int] = {}
        self.memory: dict[str, TickerMemory] = {}
        self.agenda: Agenda[str] = Agenda()
        self.deletes: dict[str, int] = {}  # ticker-state key → partition, to tombstone
        self._followed: dict[int, _Followed] = {}

    def sync(self, tables: Iterable[Table]) -> None:
        """Rebuild after the runtime replaced the tables, else apply changed watcher records."""
        held = [t for t in tables if t.spec.kind is not TableKind.GLOBAL]
        signature = tuple(sorted((t.spec.name, t.partition, id(t)) for t in held))
        if signature != self._signature:
            self._rebuild(signature, held)
            return
        for followed in self._followed.values():
            followed.refresh()

    def invalidate(self) -> None:
        """Forget everything: the next :meth:`sync` rebuilds from the (rolled-back) tables."""
        self._signature = ()

    def _rebuild(self, signature: tuple[tuple[str, int, int], ...], tables: list[Table]) -> None:
        self._signature = signature
        self.watchers, self.state = {}, {}
        self.watch, self.partition, self.memory = {}, {}, {}
        self.agenda = Agenda()
        self.deletes = {}
        for table in tables:
            if table.spec.name == WATCHERS:
                self.watchers[table.partition] = table
            elif table.spec.name == STATE:
                self.state[table.partition] = table
        for state in self.state.values():
            for key, raw in state.items():
                try:
                    found = decode_ticker_state(self.codec, raw)
                except SerdeError as exc:
                    log.error("ticker-state %s is unreadable: %s", key, exc)
                    continue
                if isinstance(found, TickerMemory):
                    self.memory[key] = found
        self._followed = {
            partition: _Followed(table, partition, self)
            for partition, table in self.watchers.items()
        }
        for followed in self._followed.values():
            followed.load()
        log.info(
            "ticker views rebuilt: %d watchers, %d memories", len(self.watch), len(self.memory)
        )

    def put(self, partition: int, key: str, watch: Watch) -> None:
        """Follow one ``watchers`` record. A watcher whose source changed moves partition: the
        command processor writes the new home and tombstones the old, in either order."""
        home = self.partition.get(key)
        if home is not None and home != partition:
            self.deletes[key] = home  # its memory is written again at its new home
        self.watch[key] = watch
        self.partition[key] = partition
        self.agenda.set(key, _ASAP)

    def drop(self, partition: int, key: str) -> None:
        """A ``watchers`` record deleted (or no longer readable) at ``partition``."""
        home = self.partition.get(key)
        if home is not None and home != partition:
            return  # the old home's tombstone, after the watcher moved
        self.watch.pop(key, None)
        self.agenda.discard(key)
        self.partition.pop(key, None)
        self.memory.pop(key, None)
        state = self.state.get(partition)
        if state is not None and key in state:
            self.deletes[key] = partition

    def forget(self, key: str) -> None:
        """A closed watcher: drop its memory (tombstoned in the next transaction)."""
        if self.memory.pop(key, None) is not None and key in self.partition:
            self.deletes[key] = self.partition[key]


class _Followed(TableView[Watch]):
    """One partition's ``watchers`` table, its changes handed to the ticker's views."""

    __slots__ = ("_partition", "_views")

    def __init__(self, table: Table, partition: int, views: TickerViews) -> None:
        codec, sealer = views.codec, views.sealer
        super().__init__(table, lambda key, raw: decode_watch(codec, sealer, key, raw), "watchers")
        self._partition = partition
        self._views = views

    def put(self, key: str, value: Watch, old: Watch | None) -> None:
        self._views.put(self._partition, key, value)

    def dropped(self, key: str, old: Watch | None) -> None:
        self._views.drop(self._partition, key)
