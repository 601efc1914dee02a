"""The console in a real browser (DESIGN.md §9 ``/ui/``): Debian's headless Chromium
(``/usr/bin/chromium``, never a downloaded one) driven by Playwright, against the real stack —
broker, Redis, command processor, evaluator, delivery, ``vigil api`` served by uvicorn and a
local webhook receiver.

One walk through: sign in with a bearer token; see the proposal an agent made and approve it,
then see it active; publish an event and see its evaluation and delivery on the watcher page;
the receiver answers 410, the dead letter shows, the receiver recovers, Redeliver, and it is
delivered under the same ``Idempotency-Key``; a chat's schedule shows its next fire and is
cancelled from the schedules page. Another tenant's watcher URL is a 404 page; an agent has no
proposals page. Each page is screenshot into ``tests/artifacts/console/``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from pipeline.rules.commands import CommandVerb
from tests.integration.api_harness import serve
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

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "console"


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


@pytest.fixture(scope="module")
def base_url(stack: ConsoleStack) -> Iterator[str]:
    with serve(stack.app) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium on a fresh, empty profile (Playwright makes one per launch)."""
    assert CHROMIUM.exists(), "install Debian's chromium (.ci/run does): apt-get install chromium"
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def sign_in(browser: Browser, base_url: str, who: str) -> Page:
    page = browser.new_context(base_url=base_url).new_page()
    page.goto("/ui/watches")
    assert page.url.endswith("/ui/sign-in"), page.url
    page.fill("#token", token_of(who))
    if who == "owner":
        shot(page, "sign-in")
    page.click("#sign-in")
    page.wait_for_url("**/ui/watches")
    return page


def until(page: Page, path: str, text: str, seconds: float = 90) -> None:
    """Reload ``path`` until it shows ``text`` (the pipeline is asynchronous)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        page.goto(path)
        if text in page.content():
            return
        time.sleep(0.5)
    raise AssertionError(f"{path} never showed {text!r}")


def _dead(stack: ConsoleStack) -> list[dict[str, Any]]:
    found = stack.call("GET", "/v1/deliveries?state=dead&watcher_id=w-browser")
    return list(found.json()["deliveries"])


def test_the_console_in_chromium_approve_see_the_evaluation_redeliver_a_dead_letter(
    stack: ConsoleStack, receiver: Receiver, browser: Browser, base_url: str
) -> None:
    proposed = stack.call(
        "POST", "/v1/watches:propose", "agent", json=agent_watch("aw-browser", run="r-2")
    )
    assert proposed.status_code == 201, proposed.text
    page = sign_in(browser, base_url, "owner")

    # A proposal an agent made: read in words, approved, active.
    page.goto("/ui/proposals")
    card = page.locator("#proposal-aw-browser")
    assert 'status = "succeeded"' in card.inner_text()
    shot(page, "proposals")
    card.locator("button.approve").click()
    page.wait_for_url("**/ui/watches/aw-browser")
    assert page.inner_text("#watch-state") == "active"

    # An event: its evaluation and its delivery on the watcher page; the receiver says 410.
    event_type = f"build.{uuid.uuid4().hex[:8]}"
    stack.ok(CommandVerb.CREATE, TENANT, USER, definition=event_watcher("w-browser", event_type))
    receiver.fail(1, 410)
    stack.publish("shared.src", event_type, "e-browser", {"status": "failed"})
    (dead,) = stack.wait("the dead letter", lambda: _dead(stack))
    key = dead["delivery_key"]
    until(page, "/ui/watches/w-browser", "dead_letter")
    evaluations = page.inner_text("#evaluations")
    assert "condition_true" in evaluations and key[:12] in evaluations
    assert "status=failed" in evaluations
    shot(page, "watch")
    page.goto("/ui/watches")  # each row: next poll, last outcome
    assert "satisfied" in page.inner_text("#watches tr:has(a[href='/ui/watches/w-browser'])")
    shot(page, "watches")

    # The dead letter, redelivered once the receiver has recovered: same key.
    page.goto("/ui/deliveries?state=dead")
    row = page.locator(f"#delivery-{key}")
    assert "http_410" in row.inner_text()
    shot(page, "deliveries")
    row.locator("button.redeliver").click()
    page.wait_for_url("**/ui/deliveries?watcher=w-browser")
    until(page, "/ui/deliveries?watcher=w-browser", "redelivered 1×")
    assert "delivered" in page.inner_text(f"#delivery-{key}")
    shot(page, "delivered")
    sent = [r for r in receiver.requests if r.idempotency_key == key]
    assert [r.status for r in sent] == [410, 200]

    # A chat's schedule: its next fire, then cancelled from the page.
    stack.chat_schedule("digest", "0 9 * * 1-5", "daily digest")
    page.goto("/ui/schedules")
    row = page.locator("#schedule-me-digest")
    assert "send daily digest" in row.inner_text() and "T09:00:00Z" in row.inner_text()
    shot(page, "schedules")
    row.locator("button.cancel").click()
    page.wait_for_url("**/ui/schedules")
    assert page.locator("#schedule-me-digest").count() == 0

    # Another tenant: the same URL is a 404 page. An agent: no proposals page.
    stranger = sign_in(browser, base_url, "stranger")
    answer = stranger.goto("/ui/watches/w-browser")
    assert answer is not None and answer.status == 404
    assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    agent = sign_in(browser, base_url, "agent")
    assert agent.locator("a[href='/ui/proposals']").count() == 0
    refused = agent.goto("/ui/proposals")
    assert refused is not None and refused.status == 404
    shot(agent, "agent-no-proposals")
