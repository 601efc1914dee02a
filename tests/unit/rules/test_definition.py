"""WatcherDefinition: the §9 JSON shape, its rules, errors naming the field, compile once."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.rules.definition import DeliveryVerb, Mode, WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.sources import PollingSource, ScheduleSource

pytestmark = pytest.mark.unit

DESIGN_EXAMPLE: dict[str, Any] = {
    "watcher_id": "release-build-failed",
    "purpose": "ops.alert",
    "mode": "every",
    "source": {
        "kind": "event",
        "source_id": "ci.pipeline",
        "event_type": "build.finished",
        "max_age": "10m",
    },
    "condition": {
        "all": [
            {"eq": ["status", "failed"]},
            {"contains": ["branch", "release/"]},
            {"exists": "commit.sha"},
        ]
    },
    "delivery": {
        "target": "ops-hook",
        "verb": "notify",
        "quiet_hours": {"start": "22:00", "end": "07:00", "timezone": "Europe/Berlin"},
    },
    "expires_at": "2027-06-01T00:00:00Z",
    "budgets": {
        "window": "1h",
        "evaluations": 100000,
        "deliveries": 20,
        "attempts": 200,
        "tokens": 0,
        "micro_usd": 0,
    },
    "retry": {"max_attempts": 8, "base": "5s", "cap": "1h"},
    "privacy": {
        "retain_paths": ["status", "branch"],
        "evidence_retention": "7d",
        "delivery_retention": "30d",
    },
}

POLLING = {
    "kind": "polling",
    "source_id": "status.page",
    "tool": "http.json@v1",
    "tool_ref": "status-page",
    "cron": "*/5 * * * *",
    "timezone": "UTC",
    "missed": "latest",
    "max_age": "10m",
}
AGENT_POLLING = {
    "kind": "polling",
    "source_id": "run:r-81",
    "tool": "workflow.run.status@v1",
    "target": "r-81",
    "cadence": "5m",
    "max_age": "2m",
}


def load(body: dict[str, Any]) -> WatcherDefinition:
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-42")


def changed(path: str, value: Any) -> dict[str, Any]:
    """The design example with one dotted field set (``None`` with ``...`` deletes)."""
    body = copy.deepcopy(DESIGN_EXAMPLE)
    *parents, last = path.split(".")
    node = body
    for part in parents:
        node = node[part]
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return body


def refused(body: dict[str, Any]) -> DefinitionError:
    with pytest.raises(DefinitionError) as caught:
        load(body)
    return caught.value


def test_design_example_loads_with_subject_and_defaults() -> None:
    defn = load(DESIGN_EXAMPLE)
    assert defn.watcher_key == ("acme", "u-42", "release-build-failed")
    assert defn.mode is Mode.EVERY and defn.version is None
    assert defn.source.max_age == timedelta(minutes=10)
    assert defn.expires_at == datetime(2027, 6, 1, tzinfo=UTC)
    assert defn.budgets is not None and defn.budgets.deliveries == 20


def test_to_json_round_trips_with_text_durations() -> None:
    defn = load(DESIGN_EXAMPLE)
    out = defn.to_json()
    assert out["source"]["max_age"] == "10m"
    assert out["budgets"]["window"] == "1h"
    assert out["retry"]["base"] == "5s"
    assert load(out) == defn


def test_with_version_assigns_the_version() -> None:
    assert load(DESIGN_EXAMPLE).with_version(4).version == 4
    assert refused(changed("version", 0)).field == "version"


def test_condition_compiles_once_per_definition() -> None:
    defn = load(DESIGN_EXAMPLE)
    assert defn.predicate is defn.predicate
    payload = {"status": "failed", "branch": "release/2", "commit": {"sha": "abc"}}
    assert defn.predicate(payload) is True
    assert defn.predicate({**payload, "status": "passed"}) is False


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("bogus", 1, "bogus"),
        ("source.bogus", 1, "source.bogus"),
        ("delivery.bogus", 1, "delivery.bogus"),
        ("source.kind", "smtp", "source"),
        ("source.max_age", "ten minutes", "source.max_age"),
        ("source.source_id", "https://ci.example/hook", "source.source_id"),
        ("source.event_type", "", "source.event_type"),
        ("delivery.target", "https://hooks.example.com/x", "delivery.target"),
        ("delivery.target", "Bearer abcdef", "delivery.target"),
        ("delivery.verb", "email", "delivery.verb"),
        ("delivery", {"target": "ops-hook", "verb": "send", "text": "x"}, "delivery.verb"),
        ("delivery.text", "hello", "delivery.text"),
        (
            "delivery.quiet_hours",
            {"start": "22:00", "end": "07:00", "timezone": "Mars/Base"},
            "delivery.quiet_hours.timezone",
        ),
        (
            "delivery.quiet_hours",
            {"start": "25:00", "end": "07:00", "timezone": "UTC"},
            "delivery.quiet_hours.start",
        ),
        ("condition", {"regex": ["a", "b"]}, "condition"),
        ("condition", ..., "condition"),
        ("terminal_condition", {"exists": "x"}, "terminal_condition"),
        ("expires_at", "tomorrow", "expires_at"),
        ("expires_at", "2027-06-01T00:00:00", "expires_at"),
        ("expires_at", ..., "expires_at"),
        ("window", "1h", "window"),
        ("watcher_id", "has space", "watcher_id"),
        ("watcher_id", "x" * 200, "watcher_id"),
        ("watcher_id", "schedule:me", "watcher_id"),
        ("purpose", "Ops Alert", "purpose"),
        ("mode", "sometimes", "mode"),
        ("retry.max_attempts", 0, "retry.max_attempts"),
        ("retry.base", "2h", "retry.base"),
        ("retry.max_attempts", "8", "retry.max_attempts"),
        ("privacy.retain_paths", ["ok", "no-dash"], "privacy.retain_paths[1]"),
        ("privacy.delivery_retention", "10m", "privacy.delivery_retention"),
        ("budgets.window", "soon", "budgets.window"),
        ("session_id", "token=abc", "session_id"),
    ],
)
def test_rule_violation_names_its_field(path: str, value: Any, field: str) -> None:
    error = refused(changed(path, value))
    assert error.field == field, str(error)


def test_delivery_retention_must_cover_max_age_plus_skew() -> None:
    body = changed("privacy.delivery_retention", "10m30s")
    assert load(body).privacy.delivery_retention == timedelta(minutes=10, seconds=30)
    assert refused(changed("privacy.delivery_retention", "10m29s")).field == (
        "privacy.delivery_retention"
    )


def test_subject_in_body_must_match_the_caller() -> None:
    assert refused(changed("tenant_id", "globex")).field == "tenant_id"
    assert load(changed("user_id", "u-42")).user_id == "u-42"


def test_bool_is_not_an_integer_for_counts() -> None:
    assert refused(changed("retry.max_attempts", True)).field == "retry.max_attempts"


# --- sources -------------------------------------------------------------------------------


def test_polling_source_with_cron_and_ref_loads() -> None:
    defn = load(changed("source", POLLING))
    assert isinstance(defn.source, PollingSource)
    assert defn.source.governed_tool == "status-page"
    assert defn.source.cron_expression == "*/5 * * * *"
    assert defn.source.missed_policy.kind == "latest"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tool": "http.json"}, "source.tool"),
        ({"tool": "HTTP@1"}, "source.tool"),
        ({"cron": "* * *"}, "source.cron"),
        ({"cron": None}, "source.cron"),
        ({"timezone": "Nowhere/City"}, "source.timezone"),
        ({"timezone": None}, "source.timezone"),
        ({"missed": "all"}, "source.missed"),
        ({"missed": {"bounded": 101}}, "source.missed.bounded"),
        ({"tool_ref": "user:pw@status.example"}, "source.tool_ref"),
        ({"target": "r-1"}, "source.tool_ref"),
        ({"cadence": "5m"}, "source.cron"),
    ],
)
def test_polling_rule_violation_names_its_field(change: dict[str, Any], field: str) -> None:
    source = {k: v for k, v in {**POLLING, **change}.items() if v is not None}
    assert refused(changed("source", source)).field == field


def test_bounded_missed_policy_is_accepted() -> None:
    defn = load(changed("source", {**POLLING, "missed": {"bounded": 100}}))
    assert isinstance(defn.source, PollingSource)
    assert defn.source.missed_policy.n == 100


def agent_body(**overrides: Any) -> dict[str, Any]:
    body = changed("source", AGENT_POLLING)
    del body["expires_at"]
    body.update(
        {
            "mode": "once",
            "condition": {"eq": ["status", "succeeded"]},
            "terminal_condition": {"eq": ["status", "failed"]},
            "window": "2h",
            "session_id": "s-1",
        }
    )
    body.update(overrides)
    return body


def test_agent_watch_loads_with_cadence_window_and_deadline() -> None:
    defn = load(agent_body())
    assert isinstance(defn.source, PollingSource)
    assert defn.source.cron_expression == "*/5 * * * *"
    assert defn.source.zone_name == "UTC"
    approved = datetime(2026, 11, 29, 12, tzinfo=UTC)
    assert defn.deadline(approved) == approved + timedelta(hours=2)
    assert defn.deadline(None) is None
    assert defn.terminal_predicate is not None
    assert defn.terminal_predicate({"status": "failed"})


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"window": "3h"}, "window"),
        ({"session_id": None}, "session_id"),
        ({"expires_at": "2027-01-01T00:00:00Z"}, "window"),
        ({"source": {**AGENT_POLLING, "cadence": "10m"}}, "source.cadence"),
        ({"source": {**AGENT_POLLING, "timezone": "UTC"}}, "source.timezone"),
    ],
)
def test_agent_watch_bounds_are_enforced(overrides: dict[str, Any], field: str) -> None:
    assert refused(agent_body(**overrides)).field == field


@pytest.mark.parametrize("window", ["30m", "1h", "2h", "6h", "12h", "24h"])
def test_every_allowed_agent_window_loads(window: str) -> None:
    assert load(agent_body(window=window)).window is not None


def schedule_body(source: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "source": source,
        "delivery": {"target": "me", "verb": "send", "text": "stand up"},
    }
    body.update(overrides)
    return body


def test_schedule_id_derives_its_source_id() -> None:
    defn = load(schedule_body({"kind": "schedule", "at": "2026-12-01T08:00:00Z"}))
    assert isinstance(defn.source, ScheduleSource)
    assert defn.source_id == "schedule:me"
    assert defn.source.max_age == timedelta(minutes=5)
    assert defn.delivery.verb is DeliveryVerb.SEND
    assert defn.predicate({}) is True


def test_schedule_built_in_python_derives_its_source_id_too() -> None:
    loaded = load(schedule_body({"kind": "schedule", "at": "2026-12-01T08:00:00Z"}))
    source = ScheduleSource(kind="schedule", at=datetime(2026, 12, 1, 8, tzinfo=UTC))
    built = loaded.model_copy(update={"source": source})
    assert built.source.source_id is None
    assert built.source_id == "schedule:me"


def test_cron_schedule_with_run_args_loads() -> None:
    source = {"kind": "schedule", "cron": "0 8 * * *", "timezone": "Europe/Berlin"}
    body = schedule_body(source, delivery={"target": "me", "verb": "run", "args": ["backup.sh"]})
    assert load(body).delivery.args == ("backup.sh",)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (schedule_body({"kind": "schedule"}), "source.at"),
        (
            schedule_body({"kind": "schedule", "at": "2026-12-01T08:00:00Z", "cron": "0 8 * * *"}),
            "source.at",
        ),
        (schedule_body({"kind": "schedule", "cron": "0 8 * * *"}), "source.timezone"),
        (
            schedule_body(
                {"kind": "schedule", "at": "2026-12-01T08:00:00Z", "source_id": "schedule:you"}
            ),
            "source.source_id",
        ),
        (
            schedule_body(
                {"kind": "schedule", "at": "2026-12-01T08:00:00Z"},
                delivery={"target": "me", "verb": "notify"},
            ),
            "delivery.verb",
        ),
        (
            schedule_body(
                {"kind": "schedule", "at": "2026-12-01T08:00:00Z"},
                delivery={"target": "me", "verb": "send"},
            ),
            "delivery.text",
        ),
        (
            schedule_body(
                {"kind": "schedule", "at": "2026-12-01T08:00:00Z"},
                delivery={"target": "me", "verb": "run", "args": []},
            ),
            "delivery.args",
        ),
        (
            schedule_body({"kind": "schedule", "at": "2026-12-01T08:00:00Z"}, watcher_id="plain"),
            "source.source_id",
        ),
    ],
)
def test_schedule_rule_violation_names_its_field(body: dict[str, Any], field: str) -> None:
    assert refused(body).field == field


def test_schedule_shaped_id_needs_a_schedule_source() -> None:
    assert refused(changed("watcher_id", "schedule:me:x")).field == "source"


def test_non_object_definition_is_refused() -> None:
    with pytest.raises(DefinitionError):
        WatcherDefinition.from_json([], tenant_id="a", user_id="b")  # type: ignore[arg-type]


def test_nan_in_a_definition_is_refused() -> None:
    with pytest.raises(DefinitionError):
        load(changed("condition", {"eq": ["x", float("nan")]}))
