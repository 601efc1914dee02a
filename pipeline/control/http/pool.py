"""The HTTP API's command clients: round trips to the command processor in parallel, each request
waiting for a free client only until its deadline.

Owns :class:`ClientPool` (several :class:`~pipeline.control.client.CommandClient` s, so
concurrent requests reach the command processor concurrently — one client serializes its round
trips; a request waits for a free one at most ``wait_s``, then :class:`PoolBusyError`, which the
routes answer 503 with ``Retry-After``). Left out: reading the log (``backend``).
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from pipeline.control.client import CommandClient
from pipeline.crypto import KeyEncryptionKeys
from pipeline.kafka.topics import Topology
from pipeline.rules.authz import Principal
from pipeline.rules.commands.model import Command, CommandResult, CommandVerb
from pipeline.rules.errors import BrokerError

__all__ = ["DEFAULT_POOL_WAIT_S", "ClientPool", "PoolBusyError"]

DEFAULT_POOL_WAIT_S: Final = 5.0


class PoolBusyError(BrokerError):
    """Every command client stayed busy past the wait: the API answers 503 with Retry-After."""

    def __init__(self, message: str, wait_s: float) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class ClientPool:
    """``size`` command clients; each request borrows one (the ``CommandPort`` of dispatch),
    waiting at most ``wait_s`` for one to be free (then :class:`BrokerError`: a 503)."""

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        *,
        size: int = 4,
        timeout_s: float = 15.0,
        wait_s: float = DEFAULT_POOL_WAIT_S,
        keks: KeyEncryptionKeys | None = None,
    ) -> None:
        keks = keks or KeyEncryptionKeys.load()
        self._wait_s = wait_s
        self._clients = [
            CommandClient(bootstrap, topology, timeout_s=timeout_s, keks=keks) for _ in range(size)
        ]
        self._free: queue.Queue[CommandClient] = queue.Queue()
        for client in self._clients:
            self._free.put(client)

    def command(
        self, verb: CommandVerb, principal: Principal, tenant_id: str, user_id: str, **fields: Any
    ) -> Command:
        return self._clients[0].command(verb, principal, tenant_id, user_id, **fields)

    def send(self, command: Command) -> CommandResult:
        with self._borrow() as client:
            return client.send(command)

    @contextmanager
    def _borrow(self) -> Iterator[CommandClient]:
        try:
            client = self._free.get(timeout=self._wait_s)
        except queue.Empty:
            raise PoolBusyError(
                f"all {len(self._clients)} command clients stayed busy for {self._wait_s:g} s: "
                "try again shortly",
                self._wait_s,
            ) from None
        try:
            yield client
        finally:
            self._free.put(client)

    def close(self) -> None:
        for client in self._clients:
            client.close()
