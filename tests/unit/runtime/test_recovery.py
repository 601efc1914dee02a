"""The loop every stage runs: transient broker failures wait and resync, other failures surface,
and a send of offsets that never returns is given up on."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from pipeline.kafka.clients import BrokerFailure, ErrorKind
from pipeline.rules.errors import BudgetStoreError
from pipeline.runtime.checkpoint import send_offsets
from pipeline.runtime.recovery import Backoff, run_steps

pytestmark = pytest.mark.unit


class _App:
    group_id = "g"

    def __init__(self) -> None:
        self.resyncs: list[object] = []

    def request_resync(self, reason: BaseException | str) -> None:
        self.resyncs.append(reason)


def _steps(*outcomes: BaseException | None, stop: threading.Event) -> Any:
    """A step that raises each outcome in turn (None: succeeds), then sets ``stop``."""
    pending = list(outcomes)

    def step() -> None:
        if not pending:
            stop.set()
            return
        outcome = pending.pop(0)
        if outcome is not None:
            raise outcome

    return step


def _quick() -> Backoff:
    return Backoff(start_s=0.0, max_s=0.0)


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_success() -> None:
    backoff = Backoff(start_s=0.2, max_s=1.0)
    assert [backoff.wait() for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.wait() == 0.2


def test_a_transient_broker_failure_asks_for_a_resync_and_the_loop_goes_on() -> None:
    app, stop = _App(), threading.Event()
    away = BrokerFailure("list offsets", code="FENCED_LEADER_EPOCH", kind=ErrorKind.RETRIABLE)
    waits: list[float] = []
    run_steps(
        app,
        _steps(away, None, away, stop=stop),
        stop,
        on_failure=lambda exc, wait: waits.append(wait),
        backoff=_quick(),
    )
    assert app.resyncs == [away, away]
    assert len(waits) == 2


def test_a_fenced_producer_resyncs_and_the_loop_goes_on() -> None:
    """A fatal producer failure (fenced) is cured by the resync's new producer: never an exit."""
    app, stop = _App(), threading.Event()
    fenced = BrokerFailure("produce", code="_FATAL", kind=ErrorKind.FATAL)
    run_steps(app, _steps(fenced, None, stop=stop), stop, backoff=_quick())
    assert app.resyncs == [fenced]


def test_a_start_that_fails_transiently_is_tried_again_and_a_permanent_one_surfaces() -> None:
    """A process started before its broker answers waits for it instead of exiting."""
    app, stop = _App(), threading.Event()
    late = BrokerFailure("restore did not reach the end", code="_TIMED_OUT",
                         kind=ErrorKind.RETRIABLE)  # fmt: skip
    starts: list[BaseException | None] = [late, late, None]
    tried: list[object] = []

    def start() -> None:
        tried.append(starts[0])
        outcome = starts.pop(0)
        if outcome is not None:
            raise outcome

    run_steps(app, _steps(None, stop=stop), stop, start=start, backoff=_quick())
    assert tried == [late, late, None] and stop.is_set() and app.resyncs == []

    denied = BrokerFailure("denied", code="TOPIC_AUTHORIZATION_FAILED", kind=ErrorKind.PERMANENT)

    def refused() -> None:
        raise denied

    with pytest.raises(BrokerFailure):
        run_steps(app, lambda: None, threading.Event(), start=refused, backoff=_quick())


def test_a_stage_failure_named_transient_waits_without_a_resync() -> None:
    app, stop = _App(), threading.Event()
    run_steps(
        app,
        _steps(BudgetStoreError("redis away"), stop=stop),
        stop,
        also=(BudgetStoreError,),
        backoff=_quick(),
    )
    assert app.resyncs == []


@pytest.mark.parametrize(
    "failure",
    [
        ValueError("a bug"),
        BrokerFailure("denied", code="TOPIC_AUTHORIZATION_FAILED", kind=ErrorKind.PERMANENT),
    ],
)
def test_anything_else_surfaces(failure: Exception) -> None:
    app, stop = _App(), threading.Event()
    with pytest.raises(type(failure)):
        run_steps(app, _steps(failure, stop=stop), stop, backoff=_quick())
    assert app.resyncs == []


class _Producer:
    def __init__(self, hang: threading.Event | None = None, error: Exception | None = None):
        self.hang = hang
        self.error = error
        self.calls = 0

    def send_offsets_to_transaction(self, positions: Any, metadata: Any, timeout: float) -> None:
        self.calls += 1
        if self.hang is not None:
            self.hang.wait()
        if self.error is not None:
            raise self.error


def test_send_offsets_that_never_returns_is_a_retriable_timeout() -> None:
    release = threading.Event()
    try:
        with pytest.raises(KafkaException) as raised:
            send_offsets(_Producer(hang=release), [], None, 0.05, grace_s=0.05)  # type: ignore[arg-type]
    finally:
        release.set()
    error = raised.value.args[0]
    assert error.code() == KafkaError._TIMED_OUT and error.retriable()


def test_send_offsets_passes_answers_and_errors_through() -> None:
    fine = _Producer()
    send_offsets(fine, [], None, 1.0)  # type: ignore[arg-type]
    assert fine.calls == 1
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    with pytest.raises(KafkaException) as raised:
        send_offsets(_Producer(error=fenced), [], None, 1.0)  # type: ignore[arg-type]
    assert raised.value is fenced
