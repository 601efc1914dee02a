"""The API's Kafka edge without Kafka: readiness is one probe per few seconds, however often
``/readyz`` is asked (no client is built per call)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from pipeline.clock import ManualClock
from pipeline.control.http.backend import LedgerStore
from pipeline.kafka.topics import Topology

pytestmark = pytest.mark.unit


def test_readiness_is_probed_once_however_often_it_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = LedgerStore("127.0.0.1:1", Topology("t.", 2), ManualClock(datetime.now(UTC)))
    probes: list[int] = []

    def probe() -> str | None:
        probes.append(1)
        return "broker unreachable"

    monkeypatch.setattr(store, "_probe", probe)
    answers = {store.ready() for _ in range(500)}
    assert answers == {"broker unreachable"} and len(probes) == 1
    store.close()


def test_a_request_waits_for_a_free_command_client_only_until_its_deadline() -> None:
    from pipeline.control.http.pool import ClientPool, PoolBusyError
    from pipeline.crypto import KeyEncryptionKeys

    pool = ClientPool("127.0.0.1:1", Topology("t.", 2), size=1, wait_s=0.2,
                      keks=KeyEncryptionKeys.load())  # fmt: skip
    try:
        with pool._borrow():  # the only client, held by a slow round trip
            started = time.monotonic()
            with pytest.raises(PoolBusyError) as busy, pool._borrow():
                pass
            assert 0.2 <= time.monotonic() - started < 5
        assert busy.value.wait_s == 0.2
        with pool._borrow():  # given back: the next request gets it at once
            pass
    finally:
        pool.close()
