from pathlib import Path
from typing import Any

import pydantic
import pytest

from pipeline.config import (
    CONFIG_ENV,
    DEFAULT_CAPS,
    VigilConfig,
    WebhookDestination,
    load_config,
    parse_config,
)
from pipeline.rules.authz import Role
from pipeline.rules.budgets import BudgetCaps, BudgetCeilings
from pipeline.rules.errors import ConfigError, DefinitionError
from pipeline.rules.zones import load_zone

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
HOOK = "destinations.ops-hook"
TOKEN_DIGEST = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def write(directory: Path, text: str, name: str = "vigil.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_example_file_loads_every_section() -> None:
    config = load_config(ROOT / "vigil.example.toml", environ={})
    assert isinstance(config.destinations["ops-hook"], WebhookDestination)
    assert config.chats["phone"].kind == "telegram"
    assert config.tools["status-page"].kind == "http.json@v1"
    assert config.principals["ops-agent"].role is Role.AGENT
    assert config.budgets.defaults.window.total_seconds() == 3600
    assert config.instance.resolved_id() == "node-1"
    assert config.kafka.topology().partitions == 12


def test_secrets_never_appear_in_repr() -> None:
    config = load_config(ROOT / "vigil.example.toml", environ={})
    text = repr(config) + str(config)
    assert TOKEN_DIGEST not in text
    assert "redis://" not in text
    assert config.principals["ops-agent"].token_sha256.get_secret_value() == TOKEN_DIGEST


def test_config_is_frozen() -> None:
    config = VigilConfig()
    with pytest.raises(pydantic.ValidationError):
        config.kafka.partitions = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"destinations": {"ops-hook": {"kind": "webhook", "url": "ftp://x"}}}, f"{HOOK}.url"),
        ({"destinations": {"ops-hook": {"kind": "webhook"}}}, f"{HOOK}.url"),
        ({"destinations": {"ops-hook": {"kind": "webhook", "url": "http://h"}}}, f"{HOOK}.webhook"),
        (
            {"destinations": {"ops-hook": {"kind": "webhook", "url": "http://h/x",
                                           "secret_env": "S", "unsigned": True}}},
            f"{HOOK}.webhook",
        ),
        ({"destinations": {"ops-hook": {"kind": "carrier-pigeon"}}}, "destinations.ops-hook"),
        ({"kafka": {"bootstrap_server": "x"}}, "kafka.bootstrap_server"),
        ({"kafka": {"partitions": 0}}, "kafka.partitions"),
        ({"chats": {"phone": {"kind": "telegram", "chat_id": 1}}}, "chats.phone.token_env"),
        ({"subject": {"timezone": "Mars/Olympus"}}, "subject.timezone"),
        ({"budgets": {"defaults": {"window": "an hour"}}}, "budgets.defaults.window"),
        ({"budgets": {"defaults": {"tokens": -1}}}, "budgets.defaults.tokens"),
        ({"agent": {"command": []}}, "agent.command"),
        ({"api": {"listen": "8088"}}, "api.listen"),
        ({"redis": {"url": "http://x"}}, "redis.url"),
        ({"tools": {"t": {"kind": "http.json"}}}, "tools.t.kind"),
        (
            {"principals": {"bot": {"token_sha256": TOKEN_DIGEST, "role": "agent",
                                    "tenant_id": "t", "user_id": "u"}}},
            "principals.bot",
        ),
        (
            {"principals": {"ci": {"token_sha256": TOKEN_DIGEST, "role": "publisher",
                                   "user_id": "ci", "sources": ["ci.pipeline"]}}},
            "principals.ci.tenant_id",
        ),
    ],
)  # fmt: skip
def test_invalid_value_error_names_its_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(data)
    lines = str(caught.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{key}:") for line in lines), str(caught.value)


def test_a_webhook_goes_unsigned_only_when_its_configuration_says_so() -> None:
    hook = {"kind": "webhook", "url": "http://h/x", "unsigned": True}
    config = parse_config({"destinations": {"ops-hook": hook}})
    assert config.destinations["ops-hook"].unsigned is True  # type: ignore[union-attr]


def test_token_that_is_not_a_digest_is_refused_without_echoing_it() -> None:
    secret = "plain-bearer-token-value"
    data = {"principals": {"p": {"token_sha256": secret, "role": "user", "tenant_id": "t",
                                 "user_id": "u"}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"principals\.p\.token_sha256") as caught:
        parse_config(data)
    assert secret not in str(caught.value)


def test_name_used_by_a_destination_and_a_chat_is_refused() -> None:
    data = {"destinations": {"me": {"kind": "log"}}, "chats": {"me": {"kind": "console"}}}
    with pytest.raises(ConfigError, match="both"):
        parse_config(data)


def test_explicit_path_wins_over_environment_and_cwd(tmp_path: Path) -> None:
    explicit = write(tmp_path, '[kafka]\ntopic_prefix = "explicit."\n', "explicit.toml")
    from_env = write(tmp_path, '[kafka]\ntopic_prefix = "env."\n', "env.toml")
    write(tmp_path, '[kafka]\ntopic_prefix = "cwd."\n')
    environ = {CONFIG_ENV: str(from_env)}
    assert load_config(explicit, environ=environ, cwd=tmp_path).kafka.topic_prefix == "explicit."
    assert load_config(None, environ=environ, cwd=tmp_path).kafka.topic_prefix == "env."
    assert load_config(None, environ={}, cwd=tmp_path).kafka.topic_prefix == "cwd."


def test_no_file_anywhere_gives_defaults(tmp_path: Path) -> None:
    config = load_config(None, environ={}, cwd=tmp_path)
    assert config == VigilConfig()
    assert config.kafka.topic_prefix == "vigil."


def test_named_file_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(missing, environ={})
    with pytest.raises(ConfigError, match="no such configuration file"):
        load_config(None, environ={CONFIG_ENV: str(missing)}, cwd=tmp_path)


def test_toml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[kafka\n")
    with pytest.raises(ConfigError, match="not valid TOML") as caught:
        load_config(path, environ={})
    assert str(path) in str(caught.value)


def test_file_errors_name_the_file_and_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[destinations.ops-hook]\nkind = "webhook"\nurl = "nope"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(path) in str(caught.value)
    assert "destinations.ops-hook.url:" in str(caught.value)


@pytest.mark.parametrize(
    ("section", "name"),
    [
        ("agent", "OPS_HOOK_SECRET"),
        ("run", "TELEGRAM_BOT_TOKEN"),
        ("agent", "TOOL_TOKEN"),
        ("agent", "VIGIL_CONFIG"),
        ("run", "VIGIL_AGENT_TOKEN"),
    ],
)
def test_agents_and_scripts_may_never_be_passed_a_secret_or_a_vigil_variable(
    section: str, name: str
) -> None:
    data = {
        "destinations": {
            "ops-hook": {"kind": "webhook", "url": "http://h/x", "secret_env": "OPS_HOOK_SECRET"}
        },
        "chats": {"phone": {"kind": "telegram", "token_env": "TELEGRAM_BOT_TOKEN", "chat_id": 1}},
        "tools": {"t": {"kind": "http.json@v1", "url": "http://h/y", "token_env": "TOOL_TOKEN"}},
        section: {"env": ["LC_ALL", name]},
    }
    with pytest.raises(ConfigError, match=rf"\[{section}\] env may not pass .*{name}"):
        parse_config(data)
    data[section] = {"env": ["LC_ALL"]}
    assert getattr(parse_config(data), section).env == ("LC_ALL",)


def test_the_key_encryption_keys_variable_is_a_secret_never_passed_on() -> None:
    """Issue 27: a KEK variable of any name is among the secrets agents and scripts never get."""
    data: dict[str, Any] = {"privacy": {"master_key_env": "OUR_KEKS"}}
    assert {"OUR_KEKS", "VIGIL_CONFIG"} <= parse_config(data).secret_env_names()
    for section in ("agent", "run"):
        with pytest.raises(ConfigError, match=r"may not pass .*OUR_KEKS"):
            parse_config({**data, section: {"env": ["OUR_KEKS"]}})


def test_limits_default_to_design_10_and_are_configurable() -> None:
    limits = parse_config({}).limits.limits()
    assert (limits.watchers, limits.proposals, limits.schedules, limits.session_schedules) == (
        1000,
        100,
        100,
        10,
    )
    assert limits.proposal_ttl.total_seconds() == 24 * 3600
    assert (limits.session_proposals, limits.agent_cron_ttl.days) == (10, 30)
    tuned = parse_config({"limits": {"schedules": 5, "proposal_ttl": "2h"}}).limits.limits()
    assert (tuned.schedules, tuned.proposal_ttl.total_seconds()) == (5, 7200)
    with pytest.raises(ConfigError, match="limits"):
        parse_config({"limits": {"proposal_ttl": "90d"}})
    with pytest.raises(ConfigError, match=r"limits\.watchers"):
        parse_config({"limits": {"watchers": 0}})
    with pytest.raises(ConfigError, match="agent_cron_ttl"):
        parse_config({"limits": {"agent_cron_ttl": "400d"}})
    short = parse_config({"limits": {"agent_cron_ttl": "7d", "session_proposals": 3}})
    assert (short.limits.limits().agent_cron_ttl.days, short.limits.session_proposals) == (7, 3)


def test_environment_variables_override_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[kafka]\nbootstrap_servers = "file:9092"\npartitions = 6\n')
    environ = {
        "VIGIL_KAFKA__BOOTSTRAP_SERVERS": "env:9092",
        "vigil_instance__namespace": "blue",  # names are case-insensitive
        "VIGIL_KAFKA__CLIENT__SECURITY_PROTOCOL": "SSL",
        "VIGIL_MASTER_KEYS": "not a key of the file",
        "VIGIL_CONFIG": str(path),
    }
    config = load_config(environ=environ)
    assert config.kafka.bootstrap_servers == "env:9092"  # variable over file
    assert config.kafka.partitions == 6  # file over default
    assert config.namespace.name == "blue"
    assert config.kafka.client == {"security_protocol": "SSL"}


def test_a_bad_environment_value_names_its_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kafka\.partitions") as caught:
        load_config(environ={"VIGIL_KAFKA__PARTITIONS": "many"}, cwd=tmp_path)
    assert "VIGIL_* variables" in str(caught.value)


def test_stale_schedule_table_is_ignored_with_one_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = {"schedule": [{"name": "standup", "cron": "0 9 * * 1-5", "send": "stand up"}]}
    with caplog.at_level("WARNING", logger="vigil.config"):
        config = parse_config(data, source="old.toml")
    assert config == parse_config({})
    assert [
        r.getMessage().startswith("old.toml: [[schedule]] is ignored") for r in caplog.records
    ] == [True]


def test_a_schedule_key_that_is_not_the_old_table_is_still_refused() -> None:
    with pytest.raises(ConfigError, match="schedule: unknown key"):
        parse_config({"schedule": {"name": "x"}})


def test_two_principals_with_one_token_are_refused_naming_both() -> None:
    """Issue 27: a duplicated token_sha256 silently mapped to one principal; now refused."""
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    principals = {
        "ops": {"token_sha256": digest, "role": "user", "tenant_id": "t", "user_id": "u"},
        "bot": {"token_sha256": digest, "role": "manager", "tenant_id": "t", "user_id": "m"},
    }
    with pytest.raises(ConfigError, match=r"\[principals\.ops\] and \[principals\.bot\]"):
        parse_config({"principals": principals})
    principals["bot"]["token_sha256"] = "0" * 64
    assert set(parse_config({"principals": principals}).principals) == {"ops", "bot"}


@pytest.mark.parametrize(
    "zone",
    ["Europe/Berlin", "UTC", "America/Argentina/Buenos_Aires", "Factory", "localtime",
     "posixrules", "Mars/Olympus", "../zoneinfo/UTC", "/etc/localtime", "Europe/berlin", ""],
)  # fmt: skip
def test_vigil_toml_accepts_a_time_zone_exactly_when_a_definition_would(zone: str) -> None:
    try:
        load_zone(zone)
        definition_accepts = True
    except DefinitionError:
        definition_accepts = False
    try:
        parse_config({"subject": {"timezone": zone}})
        config_accepts = True
    except ConfigError:
        config_accepts = False
    assert config_accepts == definition_accepts


def test_budget_tables_are_the_rules_models_with_defaults_for_what_is_left_out() -> None:
    config = load_config(
        environ={
            "VIGIL_BUDGETS__DEFAULTS__DELIVERIES": "5",
            "VIGIL_BUDGETS__CEILINGS__TOKENS": "700000",
        }
    )
    defaults, ceilings = config.budgets.defaults, config.budgets.ceilings
    assert isinstance(defaults, BudgetCaps) and isinstance(ceilings, BudgetCeilings)
    assert defaults == DEFAULT_CAPS.model_copy(update={"deliveries": 5})
    assert ceilings == BudgetCeilings(tokens=700_000)
    assert parse_config({}).budgets.defaults == DEFAULT_CAPS


@pytest.mark.parametrize(
    ("budgets", "key"),
    [
        ({"defaults": {"window": "1500ms"}}, "budgets.defaults.window"),
        ({"defaults": {"deliveries": "five"}}, "budgets.defaults.deliveries"),
        ({"defaults": {"deliveries": True}}, "budgets.defaults.deliveries"),
        ({"ceilings": {"tokens": 2**53}}, "budgets.ceilings.tokens"),
        ({"defaults": {"tokens": 10}, "ceilings": {"tokens": 5}}, "budgets.defaults.tokens"),
    ],
)
def test_a_budget_a_definition_could_not_name_is_refused_naming_its_key(
    budgets: dict[str, Any], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"budgets": budgets})
    lines = str(caught.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{key}:") for line in lines), str(caught.value)
