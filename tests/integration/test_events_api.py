"""``POST /v1/events``: a publisher's events reach a webhook through the whole pipeline; each
item is answered (accepted, or rejected with a reason); a source outside the publisher's scope
is denied per item; a token of any other role gets 403."""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from consumers.delivery.adapters.signing import Verification
from tests.chaos.load import EVENT_TYPE, Subject, event_watcher
from tests.chaos.stack import BOT_TOKEN, ROOT, SECRET, VIGIL, Stack
from tests.names import fresh
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

PUBLISHER = "pub-token-" + uuid.uuid4().hex
USER = "user-token-" + uuid.uuid4().hex
HEADERS = {"Vigil-Protocol-Version": "1"}


def _principal(name: str, token: str, role: str, extra: str = "") -> str:
    digest = hashlib.sha256(token.encode()).hexdigest()
    return (
        f'[principals.{name}]\ntoken_sha256 = "{digest}"\nrole = "{role}"\n'
        f'tenant_id = "acme"\nuser_id = "svc"\n{extra}\n'
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET, bot_token=BOT_TOKEN) as running:
        yield running


def test_events_over_http_reach_a_webhook_and_other_roles_get_403(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, receiver: Receiver
) -> None:
    run = fresh("ev")
    stack = Stack(
        tmp_path / "stack",
        bootstrap=kafka_bootstrap,
        redis_url=redis_url,
        receiver_url=receiver.url,
        partitions=2,
        topic_prefix=f"ev{run}.",
    )
    with stack.config.open("a", encoding="utf-8") as config:
        config.write(
            '\n[api]\nlisten = "127.0.0.1:0"\n\n[metrics]\nlisten = "127.0.0.1:0"\n\n'
            + _principal("builds", PUBLISHER, "publisher", 'sources = ["src.builds"]')
            + _principal("someone", USER, "user")
        )
    stack.create_topics()
    stack.start_all(("command-processor", "evaluator", "delivery"))
    api_log = tmp_path / "api.log"
    with api_log.open("wb") as log:
        api = subprocess.Popen(
            [*VIGIL, "api"], env=stack.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        subject = Subject(f"ev-{run}", "u-1", stack.bootstrap, stack.topology, stack.clock)
        with subject.client(timeout_s=30) as client:
            subject.grant(client, ["src.builds"])
            subject.create(client, event_watcher("w-http", "src.builds"))
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on (http://\S+)", api_log.read_text())):
            assert api.poll() is None and time.monotonic() < deadline, api_log.read_text()
            time.sleep(0.2)
        base = found.group(1)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {"source_id": "src.builds", "event_type": EVENT_TYPE, "observed_at": now}
        body = {
            "events": [
                {**event, "event_id": "h-1", "payload": {"status": "failed"}},
                {**event, "event_id": "h-2", "source_id": "src.other"},
                {**event, "event_id": "h-3", "observed_at": "yesterday"},
                {**event, "event_id": "h-4", "payload": {"status": "passed"}},
            ]
        }
        with httpx.Client(base_url=base, headers=HEADERS, timeout=30) as http:
            denied = http.post("/v1/events", json=body, headers={"Authorization": f"Bearer {USER}"})
            assert denied.status_code == 403
            assert denied.json()["error"]["code"] == "denied"
            answered = http.post(
                "/v1/events", json=body, headers={"Authorization": f"Bearer {PUBLISHER}"}
            )
        assert answered.status_code == 200, answered.text
        answers = answered.json()
        assert (answers["accepted"], answers["rejected"]) == (2, 2)
        status = {r["event_id"]: (r["status"], r["code"], r["field"]) for r in answers["results"]}
        assert status == {
            "h-1": ("accepted", None, None),
            "h-2": ("rejected", "denied", "source_id"),
            "h-3": ("rejected", "invalid", "observed_at"),
            "h-4": ("accepted", None, None),
        }
        try:
            delivered = receiver.wait_for(1, timeout=90)
        except TimeoutError:
            raise AssertionError(stack.logs()) from None
        assert delivered[0].signature is Verification.VALID
        assert len(receiver.distinct_keys()) == 1  # h-4 does not satisfy the condition
    finally:
        api.terminate()
        api_code = api.wait(30)
        codes = stack.stop_all(timeout_s=30)
    assert api_code == 0 and all(code == 0 for code in codes.values()), (api_code, codes)
