"""``[kafka.client]`` passthrough: names and values checked by librdkafka, secrets by ``*_env``
only, vigil's own properties refused, references resolved from the environment."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import parse_config
from pipeline.kafka import properties
from pipeline.kafka.clients import consumer_config, producer_config
from pipeline.kafka.properties import ClientProperties, check
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

SASL = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "vigil",
    "sasl_password_env": "KAFKA_PASSWORD",
    "ssl.ca.location": "/etc/vigil/ca.pem",
}


def test_a_sasl_ssl_table_is_valid() -> None:
    assert check(SASL, "client") == []


@pytest.mark.parametrize(
    ("table", "key", "says"),
    [
        ({"no_such_thing": "x"}, "no_such_thing", "No such configuration property"),
        ({"security_protocol": "BOGUS"}, "security_protocol", "Invalid value"),
        ({"sasl_password": "hunter2"}, "sasl_password", "sasl_password_env"),
        ({"ssl_key_password": "x"}, "ssl_key_password", "a secret"),
        ({"group_id": "mine"}, "group_id", "set by vigil"),
        ({"transactional.id": "x"}, "transactional.id", "set by vigil"),
        ({"sasl_password_env": "not a name"}, "sasl_password_env", "environment variable"),
        ({"linger_ms": [1]}, "linger_ms", "string, number or boolean"),
    ],
)
def test_a_bad_property_is_refused_naming_its_key(
    table: dict[str, Any], key: str, says: str
) -> None:
    problems = check(table, "client")
    assert [k for k, _ in problems] == [key]
    assert says in problems[0][1]
    assert "hunter2" not in problems[0][1]


@given(st.dictionaries(st.text(max_size=120), st.one_of(st.text(), st.integers(), st.none())))
def test_check_is_total(table: dict[str, Any]) -> None:
    problems = check(table, "consumer")
    assert all(isinstance(k, str) and isinstance(m, str) for k, m in problems)


def test_references_are_read_from_the_environment_and_named_secret() -> None:
    config = parse_config({"kafka": {"client": SASL, "consumer": {"fetch_max_bytes": 1 << 20}}})
    resolved = config.kafka.client_properties({"KAFKA_PASSWORD": "s3cret"})
    assert resolved.client["sasl.password"] == "s3cret"
    assert resolved.client["security.protocol"] == "SASL_SSL"
    assert resolved.consumer == {"fetch.max.bytes": 1 << 20}
    assert "KAFKA_PASSWORD" in config.secret_env_names()  # never passed to agents


def test_a_missing_variable_is_a_one_line_config_error() -> None:
    config = parse_config({"kafka": {"client": SASL}})
    with pytest.raises(ConfigError, match=r"kafka\.client\.sasl_password_env: the variable"):
        config.kafka.client_properties({})


def test_used_properties_reach_every_client_below_vigils_own() -> None:
    properties.use(
        ClientProperties({"client.id": "mine"}, {"linger.ms": 50}, {"fetch.wait.max.ms": 7})
    )
    try:
        producer = producer_config("b:1", transactional_id="t")
        consumer = consumer_config("b:1", "g")
    finally:
        properties.use(ClientProperties())
    assert producer["client.id"] == "mine" and producer["linger.ms"] == 50
    assert producer["transactional.id"] == "t"
    assert consumer["client.id"] == "mine" and consumer["fetch.wait.max.ms"] == 7
    assert "linger.ms" not in consumer
    assert producer["logger"] is properties.LOG  # librdkafka logs through Python logging
