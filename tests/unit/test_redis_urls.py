"""``[redis] url`` forms: one server, a Redis Cluster, Sentinel; passwords never shown."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import parse_config
from pipeline.redis.connect import parse_url
from pipeline.redis.reach import redacted
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit


def test_cluster_url_lists_every_seed_node() -> None:
    parsed = parse_url("redis+cluster://:s3cret@10.0.0.1:7000,10.0.0.2:7001")
    assert parsed.kind == "cluster" and not parsed.tls
    assert parsed.hosts == (("10.0.0.1", 7000), ("10.0.0.2", 7001))
    assert parsed.password == "s3cret" and parsed.username is None


def test_sentinel_url_names_the_service_and_database() -> None:
    parsed = parse_url("rediss+sentinel://app:pw@s1:26379,s2:26379/mymaster/2")
    assert (parsed.kind, parsed.tls, parsed.service, parsed.db) == ("sentinel", True, "mymaster", 2)
    assert parsed.username == "app"


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://s1:26379",  # no service
        "redis+cluster://host",  # no port
        "redis+cluster://h:1/3",  # clusters have database 0 only
        "redis+cluster://h:99999",
        "redis+nothing://h:1",
    ],
)
def test_bad_urls_are_refused_in_the_config_naming_the_key(url: str) -> None:
    with pytest.raises(ConfigError, match=r"redis\.url") as caught:
        parse_config({"redis": {"url": url}})
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@h:6379/0", "redis://h:6379/0"),
        ("redis+cluster://:s3cret@a:1,b:2", "redis+cluster://a:1,b:2"),
        ("redis+sentinel://u:s3cret@a:1/m/0", "redis+sentinel://a:1/m"),
    ],
)
def test_redacted_urls_keep_the_address_and_drop_the_password(url: str, shown: str) -> None:
    assert redacted(url) == shown


@given(st.text(max_size=200))
def test_parse_url_is_total(text: str) -> None:
    try:
        parsed = parse_url("redis+cluster://" + text)
    except ValueError as exc:  # the one refusal, naming what is wrong
        assert "s3cret" not in str(exc) or "s3cret" in text
        return
    assert parsed.hosts and all(0 < port < 65536 for _, port in parsed.hosts)
