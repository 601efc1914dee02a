"""Console sessions: bounded per principal so one token's sign-ins end only its own oldest
sessions, never another principal's; a full store refuses a sign-in instead of evicting anyone;
the cookie is Secure except on plain http between loopback addresses."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

from pipeline.control.http.console.sessions import SessionsFullError, SessionStore, loopback_http
from pipeline.rules.authz import Principal, Role

pytestmark = pytest.mark.unit


def principal(name: str) -> Principal:
    return Principal(name=name, role=Role.USER, tenant_id="t", user_id=name)


def test_one_principal_signing_in_again_and_again_ends_only_its_own_oldest_sessions() -> None:
    store = SessionStore(per_principal=3, max_sessions=100)
    other = store.open(principal("alice"))
    mine = [store.open(principal("mallory")) for _ in range(1000)]
    assert store.get(other.sid) is not None, "another principal's session survives"
    assert [store.get(s.sid) is not None for s in mine[-4:]] == [False, True, True, True]
    assert store.get(mine[0].sid) is None


def test_a_full_store_refuses_a_sign_in_rather_than_evicting_a_live_session() -> None:
    now = [0.0]
    store = SessionStore(per_principal=5, max_sessions=2, ttl_s=10, clock=lambda: now[0])
    first = store.open(principal("a"))
    store.open(principal("b"))
    with pytest.raises(SessionsFullError):
        store.open(principal("c"))
    assert store.get(first.sid) is not None
    now[0] = 11.0  # both expired: their slots are free again
    assert store.get(store.open(principal("c")).sid) is not None


def request(url: str, client: str) -> Request:
    scheme, _, rest = url.partition("://")
    host = rest.split("/")[0]
    scope: dict[str, Any] = {
        "type": "http",
        "scheme": scheme,
        "path": "/ui/sign-in",
        "headers": [(b"host", host.encode())],
        "client": (client, 5000),
        "server": (host.split(":")[0], 80),
        "query_string": b"",
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("url", "client", "expected"),
    [
        ("http://127.0.0.1:8088/ui", "127.0.0.1", True),
        ("http://localhost:8088/ui", "::1", True),
        ("http://vigil.example.com/ui", "127.0.0.1", False),  # a proxy: Host is public
        ("http://127.0.0.1:8088/ui", "10.0.0.7", False),  # another machine
        ("https://127.0.0.1:8088/ui", "127.0.0.1", False),
    ],
)
def test_only_plain_http_between_loopback_addresses_goes_without_secure(
    url: str, client: str, expected: bool
) -> None:
    assert loopback_http(request(url, client)) is expected
