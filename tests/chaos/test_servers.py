"""The fault tests' port lanes: a lane one of whose ports is taken is not handed out.

A server orphaned by an interrupted run keeps listening after its test process (and the lane's
lock) is gone; a new run that took that lane failed at setup with "port … is in use".
"""

from __future__ import annotations

import socket

import pytest

from tests.chaos import servers

pytestmark = [pytest.mark.unit]


def test_a_lane_with_a_listening_port_is_not_free() -> None:
    lane = servers._LANES - 1  # the last lane: the one least likely in use by a test now
    if not servers._lane_free(lane):
        pytest.skip(f"lane {lane} is in use on this machine")
    first = servers._BASE_PORT + lane * servers._SLOTS * servers._PER_SLOT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as orphan:
        orphan.bind(("127.0.0.1", first + servers._SLOTS * servers._PER_SLOT - 1))
        orphan.listen()
        assert not servers._lane_free(lane)
    assert servers._lane_free(lane)
