"""One option grammar: group options after the subcommand, ``--subject TENANT/USER`` with the
old ``--tenant/--user`` as hidden aliases, ``-h`` everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from pipeline.cli.group import vigil
from pipeline.cli.options import (
    chosen_group_protocol,
    chosen_level,
    group_protocol_option,
    log_level_option,
    parse_subject,
    spread_group_options,
    subject_option,
)
from tests.unit.ops.test_validate import FOUR_WRONG

pytestmark = pytest.mark.unit

OTHER = (
    '[kafka]\nbootstrap_servers = "127.0.0.1:1"\n[subject]\ntenant_id = "acme"\nuser_id = "ann"\n'
)


def _body(tmp_path: Path) -> Path:
    example = Path(__file__).resolve().parents[3] / "examples" / "deploy-finished-inbox.json"
    text = example.read_text(encoding="utf-8").replace("{\n", '{\n  "tenant_id": "acme",\n', 1)
    path = tmp_path / "acme.json"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "{config}", "watch", "validate", "{file}"],
        ["watch", "validate", "{file}", "--config", "{config}"],
        ["watch", "validate", "--config", "{config}", "{file}"],
    ],
)
def test_root_option_works_before_or_after_the_subcommand(tmp_path: Path, args: list[str]) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text(OTHER, encoding="utf-8")
    filled = [a.format(config=config, file=_body(tmp_path)) for a in args]
    result = CliRunner().invoke(vigil, filled)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith(": ok")


def test_without_the_config_the_same_body_names_another_subject(tmp_path: Path) -> None:
    config = tmp_path / "vigil.toml"
    config.write_text(OTHER.replace("acme", "local"), encoding="utf-8")
    result = CliRunner().invoke(
        vigil, ["watch", "validate", str(_body(tmp_path)), "--config", str(config)]
    )
    assert (
        result.exit_code == 1 and "tenant_id: does not match the caller's subject" in result.stdout
    )


def test_group_option_after_the_leaf_reaches_the_leaf() -> None:
    seen: dict[str, Any] = {}

    @click.group()
    @click.option("--timeout", type=float, default=10.0)
    @click.pass_context
    def group(ctx: click.Context, timeout: float) -> None:
        ctx.find_root().meta["vigil.timeout"] = timeout

    @group.command()
    @click.pass_context
    def leaf(ctx: click.Context) -> None:
        seen["timeout"] = ctx.find_root().meta["vigil.timeout"]

    spread_group_options(group)
    assert CliRunner().invoke(group, ["leaf", "--timeout", "5"]).exit_code == 0
    assert seen["timeout"] == 5.0
    assert CliRunner().invoke(group, ["--timeout", "7", "leaf"]).exit_code == 0
    assert seen["timeout"] == 7.0
    assert CliRunner().invoke(group, ["leaf"]).exit_code == 0
    assert seen["timeout"] == 10.0


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--subject", "acme/u-1"], ("acme", "u-1")),
        (["--subject", '["acme","u/1"]'], ("acme", "u/1")),
        (["--tenant", "acme", "--user", "u-1"], ("acme", "u-1")),
        ([], (None, None)),
    ],
)
def test_subject_option_and_its_hidden_aliases(args: list[str], expected: tuple[Any, Any]) -> None:
    seen: list[tuple[Any, Any]] = []

    @click.command()
    @subject_option(help="whose")
    def command(tenant: str | None, user: str | None) -> None:
        seen.append((tenant, user))

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    assert seen == [expected]
    assert "--tenant" not in CliRunner().invoke(command, ["--help"]).output


@pytest.mark.parametrize(
    "args",
    [
        ["--subject", "acme"],
        ["--subject", "a/b/c"],
        ["--tenant", "acme"],
        ["--subject", "a/b", "--user", "c"],
    ],
)
def test_a_half_or_doubled_subject_is_a_usage_error(args: list[str]) -> None:
    @click.command()
    @subject_option(help="whose")
    def command(tenant: str | None, user: str | None) -> None:
        raise AssertionError("not reached")

    assert CliRunner().invoke(command, args).exit_code == 2


def test_required_subject_is_refused_when_absent(tmp_path: Path) -> None:
    result = CliRunner().invoke(vigil, ["--as-operator", "erase", "--yes"])
    assert result.exit_code == 2 and "--subject TENANT/USER" in result.output


def test_parse_subject_refuses_empty_parts() -> None:
    with pytest.raises(click.BadParameter):
        parse_subject("/u")


@pytest.mark.parametrize("path", [[], ["watch"], ["watch", "validate"], ["grant", "add"], ["dev"]])
def test_dash_h_is_help_everywhere(path: list[str]) -> None:
    result = CliRunner().invoke(vigil, [*path, "-h"])
    assert result.exit_code == 0 and result.output.startswith("Usage: vigil")


def test_four_errors_still_four_lines_when_options_follow(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.json"
    wrong.write_text(FOUR_WRONG, encoding="utf-8")
    config = tmp_path / "vigil.toml"
    config.write_text(OTHER, encoding="utf-8")
    result = CliRunner().invoke(
        vigil, ["watch", "validate", "-f", str(wrong), "--config", str(config)]
    )
    assert result.exit_code == 1 and len(result.stdout.splitlines()) == 4


@pytest.mark.parametrize(
    ("args", "level"),
    [
        ([], "warning"),
        (["-v"], "info"),
        (["--log-level", "debug"], "debug"),
        (["-v", "--log-level", "error"], "error"),
    ],
)
def test_verbose_and_log_level_choose_the_level(args: list[str], level: str) -> None:
    seen: list[str] = []

    @click.command()
    @click.option("-v", "--verbose", is_flag=True)
    @log_level_option
    def worker(verbose: bool) -> None:
        seen.append(chosen_level("info" if verbose else "warning"))

    assert CliRunner().invoke(worker, args).exit_code == 0
    assert seen == [level]


@pytest.mark.parametrize(
    "process", ["command-processor", "evaluator", "ticker", "delivery", "daemon", "api"]
)
def test_every_long_running_process_takes_v_and_log_level(process: str) -> None:
    shown = CliRunner().invoke(vigil, [process, "-h"]).output
    assert "-v, --verbose" in shown and "--log-level" in shown


@pytest.mark.parametrize(
    ("args", "chosen"),
    [
        ([], "classic"),
        (["--group-protocol", "auto"], "auto"),
        (["--group-protocol", "consumer"], "consumer"),
    ],
)
def test_group_protocol_flag_wins_over_the_configured_one(args: list[str], chosen: str) -> None:
    seen: list[str] = []

    @click.command()
    @group_protocol_option
    def worker() -> None:
        seen.append(chosen_group_protocol("classic"))

    assert CliRunner().invoke(worker, args).exit_code == 0
    assert seen == [chosen]
    assert CliRunner().invoke(worker, ["--group-protocol", "range"]).exit_code == 2


@pytest.mark.parametrize("process", ["command-processor", "evaluator", "ticker", "delivery"])
def test_every_stream_process_takes_group_protocol(process: str) -> None:
    assert "--group-protocol" in CliRunner().invoke(vigil, [process, "-h"]).output
