"""The API's reads are bounded and fair, black-box: ``vigil api`` and ``vigil command-processor``
run as processes on the real broker and Redis, and the tests speak HTTP to them.

- 200 console page loads by a publisher's token start no read of the log
  (``vigil_api_log_scans_total`` on the API's ``/metrics`` stays where it was; an owner's page
  moves it, so the counter counts);
- a noisy tenant's 10,001 notifications in the same partition do not hide, nor make
  unacknowledgeable, a neighbour's one;
- a principal over its request rate is answered 429 with ``Retry-After``, API and console alike;
- with every command client busy, a request waits ``[api] command_wait`` and is answered 503 with
  ``Retry-After``;
- a subject whose grant was revoked reads neither its ledger, its wakes nor its deliveries.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
from confluent_kafka import Producer

from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.clients import producer_config
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.notification import NotificationKind, encode_notification
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import BrokerError
from pipeline.rules.keys import subject_key
from tests.names import fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

VIGIL: Final = [sys.executable, "-m", "pipeline.cli.main"]
PARTITIONS: Final = 2
TENANT, USER = "acme", "u-1"
# The neighbour of the noisy tenant: a subject no command gave a data key, so the key the test
# writes is its only one (the command processor never sees a key written behind its back).
QUIET: Final = "u-quiet"
NOISY_TENANT: Final = "globex"
# name → role, tenant, user, extra
PRINCIPALS: Final[dict[str, tuple[str, str, str, str]]] = {
    "owner": ("user", TENANT, USER, ""),
    "operator": ("operator", TENANT, "ops", ""),
    "ci": ("publisher", TENANT, "ci", 'sources = ["ci.pipeline"]\n'),
    "busy": ("user", TENANT, "u-busy", ""),
    "former": ("user", TENANT, "u-former", ""),
    "quiet": ("user", TENANT, QUIET, ""),
}
_SCANS = re.compile(r'^vigil_api_log_scans_total\{topic="([^"]+)"\} ([0-9.e+]+)$', re.M)


def token(name: str) -> str:
    return f"token-{name}-edge"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@dataclass
class Deployment:
    """Topics, a config file and the processes started on it."""

    root: Path
    bootstrap: str
    prefix: str
    api: str = ""
    metrics: str = ""

    def __post_init__(self) -> None:
        self.topology = Topology(prefix=self.prefix, partitions=PARTITIONS)
        deadline = time.monotonic() + 300  # a shared broker's controller may be slow to show them
        while True:
            try:
                ensure_topics(connect_admin(self.bootstrap), self.topology)
                break
            except BrokerError:
                if time.monotonic() > deadline:
                    raise
        self.procs: list[subprocess.Popen[bytes]] = []

    def config(self, api: str) -> Path:
        api_port, metrics_port = free_port(), free_port()
        self.api = f"http://127.0.0.1:{api_port}"
        self.metrics = f"http://127.0.0.1:{metrics_port}"
        text = (
            f'[kafka]\nbootstrap_servers = "{self.bootstrap}"\ntopic_prefix = "{self.prefix}"\n'
            f"partitions = {PARTITIONS}\nreplication_factor = 1\n\n"
            f'[redis]\nurl = "{os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")}"\n\n'
            f'[api]\nlisten = "127.0.0.1:{api_port}"\n{api}\n'
            f'[metrics]\nlisten = "127.0.0.1:0"\n\n[metrics.ports]\napi = {metrics_port}\n\n'
            f'[instance]\nid = "{self.prefix}"\nstate_dir = "{self.root / "state"}"\n\n'
        )
        for name, (role, tenant, user, extra) in PRINCIPALS.items():
            digest = hashlib.sha256(token(name).encode()).hexdigest()
            text += (
                f'[principals.{name}]\ntoken_sha256 = "{digest}"\nrole = "{role}"\n'
                f'tenant_id = "{tenant}"\nuser_id = "{user}"\n{extra}\n'
            )
        path = self.root / f"vigil-{api_port}.toml"
        path.write_text(text, encoding="utf-8")
        return path

    def start(self, config: Path, *args: str) -> None:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("VIGIL_")},
            "VIGIL_MASTER_KEYS": os.environ["VIGIL_MASTER_KEYS"],
            "VIGIL_CONFIG": str(config),
            "PYTHONUNBUFFERED": "1",
        }
        with (self.root / f"{args[0]}-{len(self.procs)}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen([*VIGIL, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
            )

    def serve(self, api: str, *, processor: bool = True) -> None:
        config = self.config(api)
        if processor:
            self.start(config, "command-processor", "--no-metrics")
        self.start(config, "api")
        wait_for(self._serving, 60, "vigil api")

    def _serving(self) -> bool:
        try:
            return httpx.get(f"{self.api}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def call(self, method: str, path: str, who: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token(who)}", "Vigil-Protocol-Version": "1"}
        return httpx.request(method, f"{self.api}{path}", headers=headers, timeout=60, **kwargs)

    def scans(self) -> float:
        text = httpx.get(f"{self.metrics}/metrics", timeout=10).text
        return sum(float(count) for _, count in _SCANS.findall(text))

    def grant(self, user: str, **fields: Any) -> str:
        until = (datetime.now(UTC) + timedelta(days=1)).isoformat().replace("+00:00", "Z")
        body = {
            "tenant_id": TENANT,
            "user_id": user,
            "purpose": "ops.alert",
            "sources": ["ci.pipeline"],
            "targets": ["in-app"],
            "actions": ["manage", "evaluate", "deliver"],
            "until": until,
            **fields,
        }
        made = wait_for(
            lambda: (
                (r := self.call("POST", "/v1/grants", "operator", json=body)).status_code == 201
                and r
            ),
            90,
            "the command processor",
        )
        return str(made.json()["grant_id"])


@pytest.fixture(scope="module")
def deployment(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    found = Deployment(tmp_path_factory.mktemp("edge"), kafka_bootstrap, fresh("t-edge") + ".")
    try:
        found.serve("rate = 2\nburst = 250\n")
        found.grant(USER)
        yield found
    finally:
        found.stop()


@contextmanager
def signed_in(deployment: Deployment, who: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=deployment.api, timeout=60, follow_redirects=False) as client:
        form = client.get("/ui/sign-in")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text[:300]
        done = client.post("/ui/sign-in", data={"token": token(who), "csrf": csrf.group(1)})
        assert done.status_code == 303, done.text[:300]
        yield client


def test_200_console_page_loads_by_a_publisher_start_no_read_of_the_log(
    deployment: Deployment,
) -> None:
    before = deployment.scans()
    pages = ("/ui/watches", "/ui/watches/w-1", "/ui/deliveries", "/ui/schedules", "/ui/proposals")
    with signed_in(deployment, "ci") as publisher:
        statuses = [publisher.get(pages[n % len(pages)]).status_code for n in range(200)]
    assert set(statuses) <= {200, 403, 404}, statuses
    assert deployment.scans() == before, "a publisher's console pages started a read"
    watcher = {
        "watcher_id": "w-edge",
        "purpose": "ops.alert",
        "source": {"kind": "event", "source_id": "ci.pipeline", "event_type": "build.finished",
                   "max_age": "10m"},
        "condition": {"eq": ["status", "failed"]},
        "delivery": {"target": "in-app"},
        "expires_at": "2099-01-01T00:00:00Z",
    }  # fmt: skip
    made = deployment.call("POST", "/v1/watches", "owner", json=watcher)
    assert made.status_code == 201, made.text
    with signed_in(deployment, "owner") as owner:
        assert owner.get("/ui/watches").status_code == 200
    assert deployment.scans() > before, "an owner's page reads its receipts: the counter counts"


def sealed_notes(ring: KeyRing, tenant: str, user: str, keys: list[str]) -> list[bytes]:
    codec = default_codec()
    now = datetime.now(UTC)
    return [
        encode_notification(
            codec,
            ring,
            NotificationKind.NOTIFICATION,
            delivery_key=key,
            tenant_id=tenant,
            user_id=user,
            watcher_id="w-note",
            session_id=None,
            created_at=now,
            content={"outcome": "satisfied", "verb": "notify", "text": f"note {key[:6]}"},
            retain_until=now + timedelta(days=1),
        )
        for key in keys
    ]


def test_a_noisy_tenants_10001_notifications_do_not_hide_a_neighbours(
    deployment: Deployment,
) -> None:
    deployment.grant(QUIET)
    count = PARTITIONS
    home = partition_for(subject_key(TENANT, QUIET), count)
    noisy = next(
        f"n-{n}"
        for n in range(1000)
        if partition_for(subject_key(NOISY_TENANT, f"n-{n}"), count) == home
    )
    ring = KeyRing(KeyEncryptionKeys.load(), default_codec())
    producer = Producer(producer_config(deployment.bootstrap))
    for tenant, user in ((TENANT, QUIET), (NOISY_TENANT, noisy)):
        owner = subject_owner(tenant, user)
        topic_key, raw = ring.create(owner, datetime.now(UTC))
        keys_partition = partition_for(
            owner.subject_key, deployment.topology.partitions_for(Topic.KEYS)
        )
        producer.produce(deployment.topology.name(Topic.KEYS), raw, topic_key, keys_partition)
    mine = hashlib.sha256(b"the neighbour's one").hexdigest()
    notes = deployment.topology.name(Topic.NOTIFICATIONS)
    for value in sealed_notes(ring, TENANT, QUIET, [mine]):
        producer.produce(notes, value, subject_key(TENANT, QUIET), home)
    flood = [hashlib.sha256(b"noise %d" % n).hexdigest() for n in range(10_001)]
    for n, value in enumerate(sealed_notes(ring, NOISY_TENANT, noisy, flood)):
        producer.produce(notes, value, subject_key(NOISY_TENANT, noisy), home)
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    listed = deployment.call("GET", "/v1/notifications", "quiet")
    assert listed.status_code == 200, listed.text
    assert [n["delivery_key"] for n in listed.json()["notifications"]] == [mine]
    acked = deployment.call("POST", f"/v1/notifications/{mine}:ack", "quiet")
    assert acked.status_code == 200 and acked.json()["already"] is False, acked.text
    again = deployment.call("GET", "/v1/notifications", "quiet").json()["notifications"]
    assert again[0]["acked_at"] == acked.json()["acked_at"]


def test_a_principal_over_its_rate_is_answered_429_with_retry_after(
    deployment: Deployment,
) -> None:
    with httpx.Client(base_url=deployment.api, timeout=60) as http:
        headers = {"Authorization": f"Bearer {token('busy')}", "Vigil-Protocol-Version": "1"}
        answers = [http.get("/v1/deliveries/not-a-key", headers=headers) for _ in range(600)]
    codes = [a.status_code for a in answers]
    assert codes[0] == 422, "a bad key: refused, but counted"
    limited = [a for a in answers if a.status_code == 429]
    assert limited, "600 requests at once against a burst of 250 and 2 a second"
    assert int(limited[0].headers["retry-after"]) >= 1
    assert limited[0].json()["error"]["code"] == "rate_limited"
    assert deployment.call("GET", "/v1/deliveries/x", "owner").status_code == 422, "others go on"
    with signed_in(deployment, "busy") as browser:
        pages = [browser.get("/ui/watches") for _ in range(30)]
    refused = [p for p in pages if p.status_code == 429]
    assert refused, "the console spends the same budget"
    assert int(refused[0].headers["retry-after"]) >= 1


def _wake_stream_status(deployment: Deployment, who: str) -> int:
    """The status a wake stream opens with; the stream itself is closed at once."""
    headers = {"Authorization": f"Bearer {token(who)}", "Vigil-Protocol-Version": "1"}
    with httpx.stream("GET", f"{deployment.api}/v1/ledger/wakes", headers=headers,
                      timeout=60) as opened:  # fmt: skip
        return opened.status_code


def test_a_revoked_grant_reads_neither_the_ledger_nor_the_deliveries(
    deployment: Deployment,
) -> None:
    grant_id = deployment.grant("u-former")
    for path in ("/v1/notifications", "/v1/deliveries"):
        assert deployment.call("GET", path, "former").status_code == 200, path
    assert _wake_stream_status(deployment, "former") == 200
    revoked = deployment.call("DELETE", f"/v1/grants/{grant_id}", "operator")
    assert revoked.status_code < 300, revoked.text
    assert _wake_stream_status(deployment, "former") == 403, "no wake stream opens"
    for path in ("/v1/notifications", "/v1/deliveries"):
        answer = deployment.call("GET", path, "former")
        assert (answer.status_code, answer.json()["error"]["code"]) == (403, "denied"), path


@pytest.fixture(scope="module")
def stalled(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """An API with one command client and no command processor behind it."""
    found = Deployment(tmp_path_factory.mktemp("stalled"), kafka_bootstrap, fresh("t-stall") + ".")
    try:
        found.serve('command_clients = 1\ncommand_wait = "1s"\n', processor=False)
        yield found
    finally:
        found.stop()


def test_with_every_command_client_busy_a_request_waits_command_wait_then_gets_503(
    stalled: Deployment,
) -> None:
    first: list[httpx.Response] = []
    holder = threading.Thread(
        target=lambda: first.append(stalled.call("GET", "/v1/watches", "owner")), daemon=True
    )
    holder.start()
    time.sleep(1.0)  # the first request holds the only client, waiting for an answer
    started = time.monotonic()
    second = stalled.call("GET", "/v1/watches", "owner")
    waited = time.monotonic() - started
    assert second.status_code == 503, second.text
    assert second.json()["error"]["code"] == "unavailable"
    assert int(second.headers["retry-after"]) >= 1
    assert 0.9 <= waited < 10, waited
    holder.join(60)
    assert first and first[0].status_code == 503, "no processor: the first times out, 503"
