"""Which Kafka APIs a broker serves: one ``ApiVersions`` request, asked before anything else.

Owns :func:`offers_consumer_groups` (does the broker serve KIP-848's heartbeat: asked once at
start to choose the group protocol), :func:`api_versions_request` and :func:`parse_api_versions`
(total and bounded: anything malformed is a :class:`ProbeError`). Leaves out what is done with
the answer (``pipeline.runtime.assignment``).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "API_VERSIONS",
    "CONSUMER_GROUP_HEARTBEAT",
    "ProbeError",
    "api_versions_request",
    "offers_consumer_groups",
    "parse_api_versions",
]

API_VERSIONS: Final = 18
CONSUMER_GROUP_HEARTBEAT: Final = 68  # KIP-848's member heartbeat
_MAX_RESPONSE: Final = 1 << 16  # a real answer is ~500 bytes; more is not a Kafka broker
_MAX_APIS: Final = 1000
_CLIENT_ID: Final = b"vigil-probe"


class ProbeError(Exception):
    """The broker could not be asked, or its answer is not an ``ApiVersions`` response."""


def api_versions_request(correlation_id: int) -> bytes:
    """A size-prefixed ``ApiVersions`` v0 request (request header v1: key, version,
    correlation id, client id)."""
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID
    return struct.pack(">i", len(body)) + body


def parse_api_versions(response: bytes, correlation_id: int) -> dict[int, tuple[int, int]]:
    """``{api key: (min version, max version)}`` from an ``ApiVersions`` v0 response body (the
    bytes after its size): correlation id, error code, then an array of (key, min, max).
    Raises :class:`ProbeError` for an error code, a foreign correlation id, a length that
    does not add up or anything else malformed."""
    if len(response) < 10:
        raise ProbeError(f"ApiVersions response too short: {len(response)} bytes")
    got, error, count = struct.unpack_from(">ihi", response, 0)
    if got != correlation_id:
        raise ProbeError(f"ApiVersions response for correlation id {got}, not {correlation_id}")
    if error != 0:
        raise ProbeError(f"ApiVersions refused with error code {error}")
    if count < 0 or count > _MAX_APIS or len(response) != 10 + 6 * count:
        raise ProbeError(f"ApiVersions response of {len(response)} bytes lists {count} APIs")
    apis: dict[int, tuple[int, int]] = {}
    for index in range(count):
        key, low, high = struct.unpack_from(">hhh", response, 10 + 6 * index)
        if low < 0 or high < low:
            raise ProbeError(f"ApiVersions lists API {key} with versions {low}..{high}")
        apis[key] = (low, high)
    return apis


def offers_consumer_groups(
    bootstrap: str, properties: Mapping[str, Any] | None = None, timeout_s: float = 5.0
) -> bool:
    """Whether the first bootstrap broker that answers serves ``ConsumerGroupHeartbeat``.
    ``properties``: the librdkafka properties of the process (``security.protocol`` and the
    ``ssl.*`` files). Raises :class:`ProbeError` when no broker answers."""
    props = dict(properties or {})
    failures: list[str] = []
    for address in (part.strip() for part in bootstrap.split(",")):
        if not address:
            continue
        try:
            apis = _ask(address, props, timeout_s)
        except (OSError, ProbeError, ValueError) as exc:
            failures.append(f"{address}: {exc}")
            continue
        return CONSUMER_GROUP_HEARTBEAT in apis
    raise ProbeError("no broker answered ApiVersions: " + "; ".join(failures or ["none named"]))


def _ask(address: str, props: dict[str, Any], timeout_s: float) -> dict[int, tuple[int, int]]:
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or address
    protocol = str(props.get("security.protocol", "plaintext")).lower()
    correlation_id = 1
    with socket.create_connection((host, int(port)), timeout=timeout_s) as raw:
        conn: socket.socket = raw
        if protocol in ("ssl", "sasl_ssl"):
            conn = _tls(props).wrap_socket(raw, server_hostname=host)
        conn.sendall(api_versions_request(correlation_id))
        (size,) = struct.unpack(">i", _read(conn, 4))
        if size < 0 or size > _MAX_RESPONSE:
            raise ProbeError(f"ApiVersions response of {size} bytes")
        return parse_api_versions(_read(conn, size), correlation_id)


def _tls(props: dict[str, Any]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
    if str(props.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    certificate = props.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(certificate, props.get("ssl.key.location"))
    return context


def _read(conn: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = conn.recv(min(left, 65536))
        if not chunk:
            raise ProbeError("the broker closed the connection mid-answer")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
