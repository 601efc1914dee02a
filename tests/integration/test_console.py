"""The console under ``/ui/`` (DESIGN.md §9) through FastAPI's TestClient, against the real
stack (broker, Redis, command processor, evaluator, delivery, a webhook receiver): sign in once
into an HttpOnly, SameSite=Strict session cookie; every form needs its CSRF token; a strict CSP
on every page; another tenant's objects are 404s; agents see no proposals and cannot approve; a
proposal approved from the console goes active; an event's evaluation and delivery show on the
watcher page; a dead letter is redelivered from the deliveries page under the same key; a chat's
schedule shows its next and last fire and is cancelled from the schedules page.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from pipeline.control.http.console import CSP
from pipeline.rules.commands import CommandVerb
from tests.integration.console_stack import (
    TENANT,
    USER,
    ConsoleStack,
    agent_watch,
    console_stack,
    event_watcher,
    token_of,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.integration

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, redis_url: str, receiver: Receiver) -> Iterator[ConsoleStack]:
    with console_stack(kafka_bootstrap, redis_url, receiver) as running:
        running.grants(TENANT, USER)
        running.agent_grants()
        yield running


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, html[:500]
    return found.group(1)


def signed_in(stack: ConsoleStack, who: str) -> tuple[TestClient, str]:
    """A browser-like client signed in as ``who``, and its session's CSRF token."""
    client = TestClient(stack.app, base_url="https://testserver", follow_redirects=False)
    form = client.get("/ui/sign-in")
    done = client.post("/ui/sign-in", data={"token": token_of(who), "csrf": csrf_of(form.text)})
    assert done.status_code == 303 and done.headers["location"] == "/ui/watches", done.text
    page = client.get("/ui/watches")
    assert page.status_code == 200, page.text
    return client, csrf_of(page.text)


def test_sign_in_sets_an_httponly_samesite_strict_cookie_and_every_page_has_a_strict_csp(
    stack: ConsoleStack,
) -> None:
    client = TestClient(stack.app, base_url="https://testserver", follow_redirects=False)
    away = client.get("/ui/watches")
    assert away.status_code == 303 and away.headers["location"] == "/ui/sign-in"
    form = client.get("/ui/sign-in")
    assert form.headers["content-security-policy"] == CSP
    assert "script-src 'none'" in CSP and "<script" not in form.text
    no_token = client.post("/ui/sign-in", data={"token": token_of("owner")})
    assert no_token.status_code == 403, "the sign-in form needs its CSRF token too"
    wrong = client.post("/ui/sign-in", data={"token": "nope", "csrf": csrf_of(form.text)})
    assert wrong.status_code == 401 and "not known" in wrong.text
    done = client.post("/ui/sign-in", data={"token": token_of("owner"), "csrf": csrf_of(form.text)})
    cookie = next(
        v for k, v in done.headers.multi_items() if k == "set-cookie" and "vigil_session=" in v
    )
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" in cookie, "not plain http between loopback addresses: Secure"
    assert token_of("owner") not in cookie, "the bearer token is never the cookie"
    for path in ("/ui/watches", "/ui/proposals", "/ui/deliveries"):
        page = client.get(path)
        assert page.status_code == 200, (path, page.text)
        assert page.headers["content-security-policy"] == CSP
        assert page.headers["cache-control"] == "no-store"
        assert "<script" not in page.text
    out = client.post("/ui/sign-out", data={"csrf": csrf_of(client.get("/ui/watches").text)})
    assert out.status_code == 303
    assert client.get("/ui/watches").status_code == 303, "signed out"


def test_a_proposal_an_agent_made_is_approved_from_the_console_and_shows_active(
    stack: ConsoleStack,
) -> None:
    made = stack.call("POST", "/v1/watches:propose", "agent", json=agent_watch("aw-ui", run="r-1"))
    assert made.status_code == 201, made.text
    owner, csrf = signed_in(stack, "owner")
    proposals = owner.get("/ui/proposals")
    assert 'id="proposal-aw-ui"' in proposals.text
    assert "status = &#34;succeeded&#34;" in proposals.text, "the condition in words"
    assert "every 5m" in proposals.text and "of 3 active agent watches" in proposals.text

    agent, agent_csrf = signed_in(stack, "agent")
    assert agent.get("/ui/proposals").status_code == 404, "agents see no proposals"
    assert 'href="/ui/proposals"' not in agent.get("/ui/watches").text
    refused = agent.post("/ui/watches/aw-ui/approve", data={"csrf": agent_csrf})
    assert refused.status_code == 403, refused.text
    forged = owner.post("/ui/watches/aw-ui/approve", data={"note": "no token"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    wrong = owner.post("/ui/watches/aw-ui/approve", data={"csrf": agent_csrf})
    assert wrong.status_code == 403, "another session's token is no token"
    still = stack.call("GET", "/v1/watches/aw-ui").json()
    assert still["status"] == "proposed"

    approved = owner.post("/ui/watches/aw-ui/approve", data={"csrf": csrf})
    assert approved.status_code == 303 and approved.headers["location"] == "/ui/watches/aw-ui"
    page = owner.get("/ui/watches/aw-ui")
    assert '<span class="state state-active" id="watch-state">active</span>' in page.text
    assert 'id="proposal-aw-ui"' not in owner.get("/ui/proposals").text
    history = page.text.split('id="lifecycle"')[1].split("</table>")[0]
    moves = re.findall(r'class="lifecycle-record".*?state-(\w+)', history)
    assert moves == ["proposed", "active"], history  # the lifecycle records, oldest first
    listed = owner.get("/ui/watches").text
    row = listed[listed.index('href="/ui/watches/aw-ui"') :].split("</tr>")[0]
    now = stack.clock.now()
    due = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while due.minute % 5:  # its cadence, 5m: the next whole five minutes
        due += timedelta(minutes=1)
    assert f'class="next-poll">{due:%Y-%m-%dT%H:%M:%S}Z<' in row, row


def _dead_letter(stack: ConsoleStack, receiver: Receiver, watcher_id: str) -> dict[str, Any]:
    event_type = f"build.{uuid.uuid4().hex[:8]}"
    stack.ok(CommandVerb.CREATE, TENANT, USER, definition=event_watcher(watcher_id, event_type))
    receiver.fail(1, 410)
    stack.publish("shared.src", event_type, f"e-{watcher_id}", {"status": "failed"})

    def dead() -> list[dict[str, Any]]:
        found = stack.call("GET", f"/v1/deliveries?state=dead&watcher_id={watcher_id}")
        return list(found.json()["deliveries"])

    (found,) = stack.wait("the dead letter", dead)
    return found


def test_the_watcher_page_shows_the_evaluation_and_a_dead_letter_is_redelivered_from_the_console(
    stack: ConsoleStack, receiver: Receiver
) -> None:
    key = _dead_letter(stack, receiver, "w-ui")["delivery_key"]
    owner, csrf = signed_in(stack, "owner")
    page = owner.get("/ui/watches/w-ui")
    assert "condition_true" in page.text and "satisfied" in page.text
    assert key[:12] in page.text and "dead_letter" in page.text
    assert "status=failed" in page.text, "the allowlisted evidence"
    listed = owner.get("/ui/watches").text
    row = listed[listed.index('href="/ui/watches/w-ui"') :].split("</tr>")[0]
    assert "state-satisfied" in row and "condition_true" in row, "the row's last outcome"
    dead = owner.get("/ui/deliveries?state=dead")
    assert f'id="delivery-{key}"' in dead.text and "http_410" in dead.text

    forged = owner.post(f"/ui/deliveries/{key}/redeliver", data={"csrf": "x" * 43})
    assert forged.status_code == 403
    stranger, stranger_csrf = signed_in(stack, "stranger")
    assert stranger.get("/ui/watches/w-ui").status_code == 404
    assert key not in stranger.get("/ui/deliveries").text
    across = stranger.post(f"/ui/deliveries/{key}/redeliver", data={"csrf": stranger_csrf})
    assert across.status_code == 404
    assert stack.call("GET", f"/v1/deliveries/{key}").json()["state"] == "dead_letter"

    done = owner.post(f"/ui/deliveries/{key}/redeliver", data={"csrf": csrf})
    assert done.status_code == 303, done.text

    def delivered() -> bool:
        return bool(stack.call("GET", f"/v1/deliveries/{key}").json()["state"] == "delivered")

    stack.wait("the redelivery", delivered)
    assert [r.status for r in receiver.requests if r.idempotency_key == key] == [410, 200]
    shown = owner.get("/ui/deliveries?watcher=w-ui")
    assert "delivered" in shown.text and "redelivered 1×" in shown.text


def test_the_status_header_shows_processes_ready_lag_and_this_windows_budgets(
    stack: ConsoleStack, receiver: Receiver
) -> None:
    _dead_letter(stack, receiver, "w-header")  # one delivery charged in this window at least
    owner, _ = signed_in(stack, "owner")

    def header() -> dict[str, str] | None:
        html = owner.get("/ui/watches").text
        found = re.search(
            r"processes ready <b>(\S+)</b>.*consumer lag <b>(\S+)</b>.*"
            r"budgets this window <b>([^<]+)</b>",
            html,
            re.S,
        )
        assert found is not None, html[:800]
        ready, lag, budgets = found.groups()
        if ready != "4/4" or "deliveries 0" in budgets:
            return None  # the 5 s cache: look again
        return {"ready": ready, "lag": lag, "budgets": budgets}

    shown = stack.wait("a full header", header, seconds=30)
    assert shown["lag"].isdigit()
    assert re.fullmatch(
        r"evaluations \d+ · deliveries [1-9]\d* · attempts [1-9]\d*", shown["budgets"]
    )


def test_the_schedules_page_shows_next_and_last_fire_and_cancels_through_the_dispatch_core(
    stack: ConsoleStack,
) -> None:
    stack.chat_schedule("standup", "* * * * *", "standup")
    owner, csrf = signed_in(stack, "owner")
    page = owner.get("/ui/schedules")
    assert 'id="schedule-me-standup"' in page.text and "<code>send standup</code>" in page.text
    assert (stack.clock.now().replace(second=0) + timedelta(minutes=1)).strftime(
        "%Y-%m-%dT%H:%M:00Z"
    ) in page.text, "the next fire"

    # The ticker fires it on time (the clock a second past a whole minute, moved on to the next
    # one while no fire shows); its receipt is the last fire.
    moved = [0.0]

    def fired() -> dict[str, Any] | None:
        found = stack.ledger.latest(TENANT, USER, ["schedule:me"]).get("schedule:me:standup")
        if found is None and time.monotonic() - moved[0] > 5:
            stack.clock.set(stack.clock.now().replace(second=1) + timedelta(minutes=1))
            moved[0] = time.monotonic()
        return found

    last = stack.wait("the schedule's fire", fired)
    due = last["trigger"]["scheduled_at"]
    shown = owner.get("/ui/schedules").text
    row = shown[shown.index('id="schedule-me-standup"') :].split("</tr>")[0]
    assert due[:19] in row and "late" not in row, row

    agent, _ = signed_in(stack, "agent")
    assert 'id="schedule-me-standup"' not in agent.get("/ui/schedules").text, "not its session's"
    chat, _ = signed_in(stack, "chat")
    assert 'id="notice"' in chat.get("/ui/schedules").text, "a scoped chat lists none"
    stranger, stranger_csrf = signed_in(stack, "stranger")
    assert "standup" not in stranger.get("/ui/schedules").text
    across = stranger.post(
        "/ui/schedules/cancel", data={"csrf": stranger_csrf, "chat": "me", "name": "standup"}
    )
    assert across.status_code == 404, across.text

    forged = owner.post("/ui/schedules/cancel", data={"chat": "me", "name": "standup"})
    assert forged.status_code == 403 and "CSRF" in forged.text
    done = owner.post("/ui/schedules/cancel", data={"csrf": csrf, "chat": "me", "name": "standup"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/schedules", done.text
    assert 'id="schedule-me-standup"' not in owner.get("/ui/schedules").text
    assert stack.call("GET", "/v1/schedules").json()["schedules"] == []
