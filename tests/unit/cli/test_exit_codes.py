"""The CLI's exit codes and error shapes: one meaning per code, ``--json`` errors as JSON."""

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.group import EXIT_INTERRUPTED, EXIT_UNAVAILABLE, _LazyGroup, vigil
from pipeline.rules.errors import ConfigError, UnavailableError

pytestmark = pytest.mark.unit


def _group_raising(exc: BaseException) -> click.Group:
    @click.group(cls=_LazyGroup)
    def root() -> None:
        pass

    @root.command()
    @click.option("--json", "as_json", is_flag=True)
    def boom(as_json: bool) -> None:
        raise exc

    return root


def test_help_documents_every_exit_code() -> None:
    text = CliRunner().invoke(vigil, ["--help"]).output
    for code, meaning in [(1, "refused"), (2, "usage"), (69, "unavailable"), (130, "interrupted")]:
        assert any(line.split()[:2] == [str(code), meaning] for line in text.splitlines()), code


def test_unavailable_is_69_with_one_line() -> None:
    error = UnavailableError("the Kafka broker", "h:1", "[kafka] bootstrap_servers", "start one")
    result = CliRunner().invoke(_group_raising(error), ["boom"])
    assert result.exit_code == EXIT_UNAVAILABLE
    assert result.stderr.splitlines() == [f"Error: {error}"]


def test_unavailable_under_json_is_one_json_object() -> None:
    error = UnavailableError("Redis", "redis://h:1/0", "[redis] url", "start one")
    result = CliRunner().invoke(_group_raising(error), ["boom", "--json"])
    assert result.exit_code == EXIT_UNAVAILABLE
    (line,) = result.stderr.splitlines()
    assert json.loads(line) == {"error": {"code": "unavailable", "message": str(error)}}


def test_refusal_is_1_and_json_says_refused() -> None:
    result = CliRunner().invoke(_group_raising(ConfigError("bad key")), ["boom", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stderr)["error"]["code"] == "refused"


def test_usage_error_under_json_is_2_and_json() -> None:
    result = CliRunner().invoke(_group_raising(ConfigError("x")), ["boom", "--json", "--nope"])
    assert result.exit_code == 2
    assert json.loads(result.stderr)["error"]["code"] == "usage"


def test_json_after_double_dash_is_a_verbs_text_not_the_flag() -> None:
    result = CliRunner().invoke(_group_raising(ConfigError("x")), ["boom", "--", "--json"])
    assert result.exit_code == 2  # the extra argument is refused in click's own words
    assert not result.stderr.startswith("{")


def test_ctrl_c_is_130() -> None:
    result = CliRunner().invoke(_group_raising(KeyboardInterrupt()), ["boom"])
    assert result.exit_code == EXIT_INTERRUPTED
    assert result.stderr.strip() == "interrupted"


def test_bad_passthrough_property_is_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text('[kafka.client]\nsecurity_protocol = "BOGUS"\n', encoding="utf-8")
    result = CliRunner().invoke(vigil, ["--config", str(config), "watch", "list"])
    assert result.exit_code == 1
    assert "kafka.client: security_protocol: Invalid value" in result.stderr
