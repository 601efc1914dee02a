"""The deployment namespace: its default, its validation and the names derived from it."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.config import parse_config
from pipeline.rules.errors import ConfigError
from pipeline.rules.namespace import DEFAULT_NAMESPACE, Namespace

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [("vigil.", "vigil"), ("acme-prod.", "acme-prod"), ("", "vigil"), ("x", "x"), (".a.", "a")],
)
def test_default_namespace_is_the_topic_prefix_without_its_trailing_dot(
    prefix: str, expected: str
) -> None:
    assert Namespace.of_topic_prefix(prefix).name == expected


@given(st.from_regex(r"[A-Za-z0-9._-]{0,200}", fullmatch=True))
def test_every_valid_topic_prefix_yields_a_valid_namespace(prefix: str) -> None:
    namespace = Namespace.of_topic_prefix(prefix)
    assert Namespace(namespace.name) == namespace  # valid: constructing it again does not raise


def test_groups_and_redis_keys_carry_the_namespace() -> None:
    namespace = Namespace("blue")
    assert namespace.group("delivery") == "blue.delivery"
    assert namespace.budget_prefix == "blue:budget:"
    assert Namespace().group("evaluator") == f"{DEFAULT_NAMESPACE}.evaluator"


@pytest.mark.parametrize("name", ["", "-x", "a b", "a:b", "x" * 65, "{tag}"])
def test_invalid_namespace_is_refused_naming_the_key(name: str) -> None:
    with pytest.raises(ConfigError, match=r"instance\.namespace"):
        Namespace(name)


def test_configured_namespace_wins_over_the_topic_prefix() -> None:
    config = parse_config({"kafka": {"topic_prefix": "t."}, "instance": {"namespace": "green"}})
    assert config.namespace == Namespace("green")
    assert parse_config({"kafka": {"topic_prefix": "t."}}).namespace == Namespace("t")


def test_namespace_with_a_colon_is_refused_in_the_file() -> None:
    with pytest.raises(ConfigError, match=r"instance\.namespace"):
        parse_config({"instance": {"namespace": "a:b"}})
