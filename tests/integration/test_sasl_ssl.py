"""The whole pipeline against a broker that only lets vigil in over SASL_SSL: the project's
``kafka.sh`` starts a broker of this test's own with a SASL_SSL listener (a CA and a server
certificate generated here, a PLAIN user), vigil's configuration reaches it through
``[kafka.client]`` (the password by ``sasl_password_env`` only), and an event published there is
delivered to a webhook. A wrong password is one line and exit 69, never a hang."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from consumers.delivery.adapters.signing import Verification
from pipeline.kafka import properties
from pipeline.kafka.properties import ClientProperties
from producers.publish.publisher import EventPublisher
from tests.chaos.load import EVENT_TYPE, Subject, event_watcher
from tests.chaos.servers import OwnKafka, ServerError, worker_ports
from tests.chaos.stack import BOT_TOKEN, SECRET, Stack
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PASSWORD = "vigil-" + uuid.uuid4().hex
PASSWORD_ENV = "VIGIL_TEST_KAFKA_PASSWORD"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificates(directory: Path) -> tuple[Path, Path]:
    """(the CA certificate, the broker's PEM keystore: key then chain), both written here."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("vigil test CA"))
        .issuer_name(_name("vigil test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca.public_bytes(pem))
    keystore = directory / "broker.pem"
    keystore.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        + cert.public_bytes(pem)
        + ca.public_bytes(pem)
    )
    return ca_path, keystore


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[tuple[OwnKafka, int, Path]]:
    base = worker_ports(slot=1)[0] + 6  # this worker's own ports (the one-host test uses +0..+5)
    ca, keystore = _certificates(tmp_path)
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="admin-{PASSWORD}" user_vigil="{PASSWORD}";\n'
    )
    server = OwnKafka(
        base,
        base + 1,
        tmp_path / "kafka",
        {
            "KAFKA_SASL_PORT": str(base + 2),
            "KAFKA_SSL_KEYSTORE": str(keystore),
            "KAFKA_SASL_JAAS": str(jaas),
        },
    )
    try:
        server.start()
        yield server, base + 2, ca
    finally:
        with contextlib.suppress(ServerError):
            server.stop()


def _client_table(ca: Path) -> str:
    return (
        "\n[kafka.client]\n"
        'security_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\nsasl_username = "vigil"\n'
        f'sasl_password_env = "{PASSWORD_ENV}"\nssl_ca_location = "{ca}"\n'
    )


def _create_topics_once_the_listener_answers(stack: Stack, timeout_s: float = 120) -> None:
    """``vigil topics create``, again while the broker's SASL_SSL listener does not answer yet:
    the broker is up once its plaintext port answers, but a busy JVM takes a while to complete
    TLS handshakes within the CLI's 2 s connection setup."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            stack.create_topics()
            return
        except AssertionError as exc:
            if "does not answer" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(1.0)


def test_the_pipeline_delivers_through_a_sasl_ssl_listener(
    tmp_path: Path, sasl_broker: tuple[OwnKafka, int, Path], redis_url: str
) -> None:
    _, sasl_port, ca = sasl_broker
    bootstrap = f"127.0.0.1:{sasl_port}"
    with Receiver(secret=SECRET, bot_token=BOT_TOKEN) as receiver:
        stack = Stack(
            tmp_path / "stack",
            bootstrap=bootstrap,
            redis_url=redis_url,
            receiver_url=receiver.url,
            partitions=2,
            topic_prefix=f"s{uuid.uuid4().hex[:8]}.",
        )
        with stack.config.open("a", encoding="utf-8") as config:
            config.write(_client_table(ca))
        stack.env[PASSWORD_ENV] = PASSWORD
        # This test process's own clients (commands, the publisher) use the same properties.
        properties.use(
            ClientProperties(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "PLAIN",
                    "sasl.username": "vigil",
                    "sasl.password": PASSWORD,
                    "ssl.ca.location": str(ca),
                }
            )
        )
        try:
            _create_topics_once_the_listener_answers(stack)
            stack.start_all(("command-processor", "evaluator", "delivery"))
            subject = Subject(
                f"s-{uuid.uuid4().hex[:6]}", "u-1", bootstrap, stack.topology, stack.clock
            )
            with subject.client(timeout_s=30) as client:
                subject.grant(client, ["src.tls"])
                subject.create(client, event_watcher("w-tls", "src.tls"))
            with EventPublisher(bootstrap, stack.topology) as publisher:
                payload = {"status": "failed"}
                publisher.publish("src.tls", EVENT_TYPE, "t-1", payload, datetime.now(UTC))
            try:
                delivered = receiver.wait_for(1, timeout=120)
            except TimeoutError:
                raise AssertionError(stack.logs()) from None
            assert delivered[0].signature is Verification.VALID
        finally:
            properties.use(ClientProperties())
            codes = stack.stop_all(timeout_s=30)
        assert all(code == 0 for code in codes.values()), (codes, stack.logs())

        wrong = subprocess.run(
            [sys.executable, "-m", "pipeline.cli.main", "watch", "list"],
            env={**stack.env, PASSWORD_ENV: "not-the-password"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert wrong.returncode == 69, wrong.stderr
        (line,) = wrong.stderr.splitlines()
        assert bootstrap in line and "[kafka.client]" in line and "not-the-password" not in line
        assert os.environ.get(PASSWORD_ENV) is None  # the test never leaked it to its own env
