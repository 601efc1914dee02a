"""The stream runtime as the delivery consumer reads its tables.

Delivery writes when nothing arrives (a retry falls due, a claim must be persisted before its
destination is called), through the runtime's own timer-driven hooks:
:meth:`~pipeline.runtime.app.StreamApp.begin`, :meth:`~pipeline.runtime.app.StreamApp.context`,
:meth:`~pipeline.runtime.app.StreamApp.catch_up`, :meth:`~pipeline.runtime.app.StreamApp.commit`
and :attr:`~pipeline.runtime.app.StreamApp.aborts` (to notice a rollback). Every one of those
transactions carries the group metadata, so a zombie's claim cannot commit (DESIGN.md §4).
:class:`DeliveryApp` adds only the views of the tables the worker reads by name.

Leaves out what is processed (``consumers.delivery.loop``) and transactions (the runtime).
"""

from __future__ import annotations

from pipeline.runtime.app import StreamApp
from pipeline.runtime.tables import Table

__all__ = ["DeliveryApp"]


class DeliveryApp(StreamApp):
    """A :class:`StreamApp` with its tables looked up by name."""

    def global_table(self, table_name: str) -> Table:
        """A whole-topic table (``grants``, ``lifecycle``), loaded by :meth:`start`."""
        return self.table(table_name, -1)

    def stores(self, table_name: str) -> dict[int, Table]:
        """The per-partition stores of one table held now, by partition (they change on a
        restore: compare them by identity)."""
        return {
            t.partition: t for t in self.tables() if t.spec.name == table_name and t.partition >= 0
        }
