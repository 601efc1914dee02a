"""Message templates: a total, bounded parser; rendering over retained leaves only; the default
message; each channel's escaping; and the refusal at create of a field the receipt does not keep.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.rules.authz import Action, Grant
from pipeline.rules.bounds import MAX_MESSAGE, MAX_TEMPLATE, MAX_TEMPLATE_FIELDS
from pipeline.rules.budgets import BudgetVerdict
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.definition_check import definition_problems
from pipeline.rules.errors import DefinitionError
from pipeline.rules.evaluation import evaluate, recorded_budget
from pipeline.rules.evidence import Evidence, EvidenceKind
from pipeline.rules.lifecycle import WatcherStatus
from pipeline.rules.message import (
    _BREAKS,
    _UNSAFE,
    ABSENT,
    FIELDS,
    MAX_VALUE,
    Channel,
    MessageFields,
    MessageTemplate,
    Slot,
    default_message,
    for_channel,
    parse_template,
    render,
)
from pipeline.rules.outbox import build_entry
from pipeline.rules.outcomes import Outcome
from pipeline.rules.watcher_state import WatcherState
from tests.unit.rules.test_definition import DESIGN_EXAMPLE, POLLING

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)
OBSERVED = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RETAINED = (("status",), ("branch",), ("commit", "sha"))
PAYLOAD: dict[str, Any] = {
    "status": "failed",
    "branch": "release/1.2",
    "commit": {"sha": "abc123", "author": "ann@example.com"},
    "token": "s3cr3t",
}


def fields(payload: dict[str, Any] | None = None, **changes: Any) -> MessageFields:
    named: dict[str, Any] = {
        "watcher_id": "release-build-failed",
        "purpose": "ops.alert",
        "outcome": "satisfied",
        "observed_at": OBSERVED,
        "due_at": NOW,
        "payload": PAYLOAD if payload is None else payload,
        "retained": RETAINED,
        "event_type": "build.finished",
        "event_id": "b-1",
    }
    return MessageFields(**(named | changes))


def definition(delivery: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """DESIGN §9's example (retaining status and branch) with ``delivery`` fields added."""
    body = copy.deepcopy(DESIGN_EXAMPLE)
    body["delivery"] |= delivery
    return body | changes


def create(body: dict[str, Any]) -> WatcherDefinition:
    return WatcherDefinition.from_json(body, tenant_id="acme", user_id="u-42")


# --- the grammar --------------------------------------------------------------------------------


def test_a_template_parses_into_literal_text_and_slots_in_order() -> None:
    template = parse_template("Build {event_id} {{ok}} on {payload.commit.sha}")
    assert template.parts == (
        "Build ",
        Slot("event_id"),
        " {ok} on ",
        Slot("payload", ("commit", "sha")),
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "1..1024 characters"),
        ("x" * (MAX_TEMPLATE + 1), "1..1024 characters"),
        ("Build {event_id", "a lone { at 6"),
        ("Build } failed", "a lone } at 6"),
        ("{payload}", "unknown field {payload}"),
        ("{status}", "unknown field {status}"),
        ("{event_id.__class__}", "unknown field {event_id.__class__}"),
        ("{event_id[0]}", "unknown field {event_id[0]}"),
        ("{event_id!r}", "unknown field {event_id!r}"),
        ("{event_id:>999999999}", "unknown field {event_id:>999999999}"),
        ("{ event_id }", "unknown field { event_id }"),
        ("{payload.a-b}", "{payload.a-b} at 0: invalid path"),
        ("{payload.0}", "{payload.0} at 0: invalid path"),
        ("bell \x07", "control character U+0007 at 5"),
        ("swap \u202e", "control character U+202E at 5"),
        ("{event_id}" * (MAX_TEMPLATE_FIELDS + 1), "at most 32 fields"),
    ],
)
def test_a_template_outside_the_grammar_is_refused_naming_delivery_message(
    text: str, said: str
) -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_template(text)
    assert refused.value.field == "delivery.message"
    assert said in refused.value.message


def test_a_template_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(DefinitionError, match="a message template is a string, not int"):
        parse_template(7)


@given(st.text(max_size=2 * MAX_TEMPLATE))
def test_any_string_either_parses_or_is_refused_with_a_reason(text: str) -> None:
    try:
        template = parse_template(text)
    except DefinitionError as refused:
        assert refused.field == "delivery.message" and refused.message
        return
    assert len(template.slots) <= MAX_TEMPLATE_FIELDS
    for part in template.parts:
        assert isinstance(part, str) or part.name in FIELDS or part.name == "payload"


_PIECES = st.sampled_from(
    ["{", "}", "{{", "}}", "payload.", "event_id", "status", ".", "a", " ", "\n", "\x00", "é"]
)


@given(st.lists(_PIECES, max_size=60).map("".join))
def test_brace_heavy_strings_either_parse_or_are_refused_with_a_reason(text: str) -> None:
    try:
        parse_template(text)
    except DefinitionError as refused:
        assert refused.field == "delivery.message" and refused.message


# --- rendering ----------------------------------------------------------------------------------


def test_a_template_renders_named_fields_and_retained_leaves() -> None:
    template = parse_template(
        "Build {event_id} {payload.status} on {payload.branch} ({outcome}, {purpose}) "
        "seen {observed_at}, due {due_at}, {event_type} of {watcher_id}"
    )
    assert render(template, fields()) == (
        "Build b-1 failed on release/1.2 (satisfied, ops.alert) seen 2026-11-29T12:00:00Z, "
        "due 2026-11-29T12:00:05Z, build.finished of release-build-failed"
    )


def test_rendering_shows_absent_for_a_leaf_the_evidence_lacks_and_json_for_non_strings() -> None:
    template = parse_template("{payload.status}|{payload.branch}|{payload.commit.sha}")
    payload = {"status": 3, "branch": None, "commit": {"sha": True}}
    assert render(template, fields(payload)) == "3|null|true"
    assert render(template, fields({})) == f"{ABSENT}|{ABSENT}|{ABSENT}"


def test_rendering_never_shows_a_leaf_outside_the_allowlist_even_when_a_template_names_it() -> None:
    unchecked = MessageTemplate(("{", Slot("payload", ("token",)), Slot("payload", ("commit",))))
    assert render(unchecked, fields()) == "{" + ABSENT + ABSENT


def test_a_value_keeps_to_one_line_and_is_cut_to_its_bound() -> None:
    template = parse_template("branch: {payload.branch}")
    forged = fields({"branch": "main\nstatus: passed\r\n\u2028x\x1b[2J"})
    assert render(template, forged) == "branch: main status: passed  x\ufffd[2J"
    long = render(template, fields({"branch": "b" * 1000}))
    assert long == "branch: " + "b" * (MAX_VALUE - 1) + "…"


def test_a_rendered_message_is_cut_to_the_message_bound() -> None:
    template = parse_template("{payload.branch}" * MAX_TEMPLATE_FIELDS)
    text = render(template, fields({"branch": "b" * MAX_VALUE}))
    assert len(text) == MAX_MESSAGE and text.endswith("…")


_SECRET = "SECRET-LEAF-VALUE"
_SEGMENTS = st.sampled_from(["status", "branch", "commit", "sha", "token", "a"])
_PATHS = st.lists(_SEGMENTS, min_size=1, max_size=3).map(tuple)


@given(
    paths=st.lists(_PATHS, max_size=5),
    retained=st.lists(_PATHS, max_size=4),
    literal=st.text(alphabet="ab {}", max_size=10),
)
def test_rendering_never_emits_a_leaf_the_allowlist_does_not_keep(
    paths: list[tuple[str, ...]], retained: list[tuple[str, ...]], literal: str
) -> None:
    payload: dict[str, Any] = {}
    for path in paths:  # plant the secret at every generated path the allowlist does not keep
        node = payload
        for segment in path[:-1]:
            child = node.setdefault(segment, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            if path not in retained and not isinstance(node.get(path[-1]), dict):
                node[path[-1]] = _SECRET
    parts: list[str | Slot] = [literal, *(Slot("payload", path) for path in paths)]
    made = fields(payload, retained=tuple(retained))
    assert _SECRET not in render(MessageTemplate(tuple(parts)), made)
    assert _SECRET not in default_message(made)


@given(st.text(max_size=300), st.dictionaries(_SEGMENTS, st.text(max_size=40), max_size=4))
def test_rendering_is_deterministic_for_any_parsed_template(
    text: str, payload: dict[str, str]
) -> None:
    try:
        template = parse_template(text)
    except DefinitionError:
        return
    made = fields(payload, retained=tuple((name,) for name in payload))
    assert render(template, made) == render(template, made)
    assert len(render(template, made)) <= MAX_MESSAGE


def test_every_printable_character_is_one_a_value_keeps_as_it_is() -> None:
    """The fast path of rendering a value: printable text needs no replacing."""
    for code in range(0x110000):
        char = chr(code)
        if char.isprintable():
            assert _BREAKS.match(char) is None and _UNSAFE.match(char) is None, hex(code)


# --- the default message ------------------------------------------------------------------------


def test_the_default_message_states_purpose_outcome_and_each_retained_leaf() -> None:
    assert default_message(fields()) == (
        "release-build-failed: satisfied (purpose ops.alert)\n"
        "build.finished b-1 observed 2026-11-29T12:00:00Z\n"
        "status: failed\n"
        "branch: release/1.2\n"
        "commit.sha: abc123"
    )


def test_the_default_message_of_a_poll_leaves_out_what_the_receipt_does_not_keep() -> None:
    text = default_message(fields(event_type=None, event_id=None, retained=(("status",),)))
    assert text == (
        "release-build-failed: satisfied (purpose ops.alert)\n"
        "poll observed 2026-11-29T12:00:00Z\n"
        "status: failed"
    )
    assert "release/1.2" not in text and "s3cr3t" not in text


# --- channels -----------------------------------------------------------------------------------


def test_each_channel_replaces_unsafe_characters_and_a_log_keeps_to_one_line() -> None:
    text = "a\tb\r\nc\x1b[31m\u202ed\\e"
    plain = "a\tb\nc\ufffd[31m\ufffdd\\e"
    for channel in (Channel.CHAT, Channel.IN_APP, Channel.WEBHOOK):
        assert for_channel(text, channel) == plain
    assert for_channel(text, Channel.LOG) == "a\\tb\\nc\ufffd[31m\ufffdd\\\\e"


@given(st.text(max_size=5000), st.sampled_from(list(Channel)))
def test_a_channel_text_is_bounded_and_a_log_line_is_one_line(text: str, channel: Channel) -> None:
    escaped = for_channel(text, channel)
    assert len(escaped) <= MAX_MESSAGE
    escaped.encode("utf-8")  # no lone surrogate survives
    if channel is Channel.LOG:
        assert "\n" not in escaped and "\r" not in escaped


# --- at create ----------------------------------------------------------------------------------


def test_a_template_over_retained_leaves_is_accepted_and_parsed_once() -> None:
    made = create(definition({"message": "Build {event_id} failed on {payload.branch}"}))
    assert made.delivery.template is made.delivery.template
    assert made.delivery.template is not None
    assert made.to_json()["delivery"]["message"] == "Build {event_id} failed on {payload.branch}"


def test_a_template_naming_a_leaf_outside_the_allowlist_is_refused_at_create() -> None:
    with pytest.raises(DefinitionError) as refused:
        create(definition({"message": "Build {event_id} by {payload.commit.author}"}))
    assert refused.value.field == "delivery.message"
    assert "{payload.commit.author} is not a leaf privacy.retain_paths keeps" in str(refused.value)


def test_a_retained_path_holding_an_object_renders_absent_as_its_receipt_keeps_nothing() -> None:
    body = definition(
        {"message": "{payload.commit} {payload.commit.sha}"},
        privacy={"retain_paths": ["commit", "commit.sha"]},
    )
    template = create(body).delivery.template
    assert template is not None
    retained = (("commit",), ("commit", "sha"))
    assert render(template, fields(retained=retained)) == f"{ABSENT} abc123"
    assert "author" not in default_message(fields(retained=retained))


def test_validate_reports_a_template_field_outside_the_allowlist_with_other_problems() -> None:
    body = definition({"message": "{payload.token}"}, mode="sometimes")
    problems = definition_problems(body, tenant_id="acme", user_id="u-42")
    assert [p.field for p in problems] == ["mode", "delivery.message"]
    assert "{payload.token} is not a leaf" in problems[1].message


def test_a_message_on_a_verb_other_than_notify_is_refused() -> None:
    body = {
        "watcher_id": "schedule:me:standup",
        "purpose": "schedule.chat",
        "source": {"kind": "schedule", "at": "2026-11-29T12:00:00Z"},
        "delivery": {"target": "me", "verb": "send", "text": "standup", "message": "{due_at}"},
    }
    with pytest.raises(DefinitionError, match="verb send takes no message") as refused:
        create(body)
    assert refused.value.field == "delivery.message"


def test_an_event_field_in_a_polling_watchers_template_is_refused() -> None:
    source = POLLING
    with pytest.raises(DefinitionError, match=r"\{event_id\} is an event's field"):
        create(definition({"message": "down since {event_id}"}, source=source))
    made = create(definition({"message": "{payload.status} at {observed_at}"}, source=source))
    assert made.delivery.template is not None


# --- through evaluation -------------------------------------------------------------------------


def _evaluated(delivery: dict[str, Any]) -> Any:
    made = create(definition(delivery)).with_version(1)
    evidence = Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci.pipeline",
        event_type="build.finished",
        event_id="b-1",
        observed_at=OBSERVED,
        payload=PAYLOAD,
    )
    grant = Grant(
        grant_id="g-1",
        tenant_id="acme",
        user_id="u-42",
        purpose="ops.alert",
        sources=frozenset({"ci.pipeline"}),
        actions=frozenset({Action.EVALUATE}),
        until=datetime(2099, 1, 1, tzinfo=UTC),
    )
    state = WatcherState(version=1, status=WatcherStatus.ACTIVE)
    return evaluate(made, state, evidence, [grant], NOW, recorded_budget(BudgetVerdict.OK))


def test_a_satisfied_entry_carries_its_rendered_message() -> None:
    result = _evaluated({"message": "Build {event_id} failed on {payload.branch}"})
    assert result.outcome is Outcome.SATISFIED
    assert result.outbox.message == "Build b-1 failed on release/1.2"


def test_a_satisfied_entry_without_a_template_carries_the_default_message_of_its_receipt() -> None:
    result = _evaluated({})
    assert result.outbox.message == (
        "release-build-failed: satisfied (purpose ops.alert)\n"
        "build.finished b-1 observed 2026-11-29T12:00:00Z\n"
        "status: failed\n"
        "branch: release/1.2"
    )
    for path, value in (("status", "failed"), ("branch", "release/1.2")):
        assert result.receipt.payload[path] == value  # every leaf shown is one the receipt keeps
    assert "abc123" not in result.outbox.message and "s3cr3t" not in result.outbox.message


def test_a_resolved_entry_renders_its_own_outcome() -> None:
    made = create(definition({"message": "{outcome}: {event_id}"})).with_version(1)
    evidence = Evidence(
        source_kind=EvidenceKind.EVENT,
        source_id="ci.pipeline",
        event_type="build.finished",
        event_id="b-2",
        observed_at=OBSERVED,
        payload={"status": "passed"},
    )
    entry = build_entry(made, evidence, "ab" * 32, NOW, outcome=Outcome.RESOLVED)
    assert (entry.outcome, entry.message) == (Outcome.RESOLVED, "resolved: b-2")
