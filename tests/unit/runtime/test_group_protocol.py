"""Which group protocol a process runs: ``[kafka] group_protocol`` and what the broker serves."""

from __future__ import annotations

import pytest

from pipeline.runtime.assignment import (
    GroupProtocol,
    choose_group_protocol,
    resolve_group_protocol,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("choice", "offers", "expected"),
    [
        ("auto", True, GroupProtocol.CONSUMER),
        ("auto", False, GroupProtocol.CLASSIC),  # Tansu, Kafka before 4.0
        ("auto", None, GroupProtocol.CLASSIC),  # not asked: classic works everywhere
        ("classic", True, GroupProtocol.CLASSIC),
        ("consumer", False, GroupProtocol.CONSUMER),  # forced: the broker will say no itself
        ("consumer", None, GroupProtocol.CONSUMER),
        ("classic", None, GroupProtocol.CLASSIC),
    ],
)
def test_auto_takes_kip_848_only_where_the_broker_serves_it(
    choice: str, offers: bool | None, expected: GroupProtocol
) -> None:
    assert choose_group_protocol(choice, offers) is expected


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError):
        choose_group_protocol("cooperative-sticky", True)


def test_a_forced_protocol_asks_no_broker() -> None:
    # Port 1 answers nothing: a probe would fail, so no probe happened.
    assert resolve_group_protocol("consumer", "127.0.0.1:1") is GroupProtocol.CONSUMER
    assert resolve_group_protocol("classic", "127.0.0.1:1") is GroupProtocol.CLASSIC


def test_auto_falls_back_to_classic_when_the_broker_cannot_be_asked() -> None:
    assert resolve_group_protocol("auto", "127.0.0.1:1") is GroupProtocol.CLASSIC
