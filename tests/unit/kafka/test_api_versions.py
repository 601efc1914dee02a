"""The ``ApiVersions`` probe: the request's bytes, and a total, bounded parser of the answer."""

from __future__ import annotations

import socket
import struct
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.kafka.api_versions import (
    API_VERSIONS,
    CONSUMER_GROUP_HEARTBEAT,
    ProbeError,
    api_versions_request,
    offers_consumer_groups,
    parse_api_versions,
)

pytestmark = pytest.mark.unit


def _response(correlation_id: int, apis: dict[int, tuple[int, int]], error: int = 0) -> bytes:
    body = struct.pack(">ihi", correlation_id, error, len(apis))
    for key, (low, high) in apis.items():
        body += struct.pack(">hhh", key, low, high)
    return body


def test_the_request_is_a_size_prefixed_api_versions_v0_with_a_client_id() -> None:
    data = api_versions_request(7)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    key, version, correlation, id_length = struct.unpack_from(">hhih", data, 4)
    assert (key, version, correlation) == (API_VERSIONS, 0, 7)
    assert data[14:] == b"vigil-probe" and id_length == len(b"vigil-probe")


def test_a_response_lists_each_api_with_its_versions() -> None:
    apis = {0: (0, 12), API_VERSIONS: (0, 4), CONSUMER_GROUP_HEARTBEAT: (0, 1)}
    assert parse_api_versions(_response(3, apis), 3) == apis


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (b"", "too short"),
        (_response(4, {0: (0, 1)}), "correlation id 4"),
        (_response(3, {}, error=35), "error code 35"),
        (_response(3, {0: (0, 1)})[:-1], "lists 1 APIs"),
        (_response(3, {0: (0, 1)}) + b"\0", "lists 1 APIs"),
        (struct.pack(">ihi", 3, 0, -1), "lists -1 APIs"),
        (_response(3, {0: (3, 1)}), "versions 3..1"),
    ],
)
def test_a_malformed_response_is_a_probe_error_naming_why(response: bytes, why: str) -> None:
    with pytest.raises(ProbeError, match=why):
        parse_api_versions(response, 3)


@given(st.binary(max_size=200))
def test_any_bytes_parse_or_are_a_probe_error(data: bytes) -> None:
    try:
        apis = parse_api_versions(data, 1)
    except ProbeError:
        return
    assert all(0 <= low <= high for low, high in apis.values())


def _one_answer(answer: bytes) -> tuple[str, threading.Thread]:
    """A listener that reads one request and writes ``answer`` (size-prefixed)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        with server, server.accept()[0] as conn:
            (size,) = struct.unpack(">i", conn.recv(4))
            conn.recv(size)
            conn.sendall(struct.pack(">i", len(answer)) + answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"127.0.0.1:{port}", thread


@pytest.mark.parametrize("offers", [True, False])
def test_the_probe_reads_whether_the_broker_serves_consumer_group_heartbeat(offers: bool) -> None:
    apis = {API_VERSIONS: (0, 4), **({CONSUMER_GROUP_HEARTBEAT: (0, 1)} if offers else {})}
    address, thread = _one_answer(_response(1, apis))
    assert offers_consumer_groups(address, timeout_s=5) is offers
    thread.join(5)


def test_a_broker_that_does_not_answer_is_a_probe_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    with pytest.raises(ProbeError, match="no broker answered"):
        offers_consumer_groups(f"127.0.0.1:{port}", timeout_s=1)
