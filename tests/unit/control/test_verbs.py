"""The verb grammar: what a request may say, and what a schedule may wrap (seed 001)."""

from __future__ import annotations

import pytest

from pipeline.control.verbs import (
    CancelRequest,
    PromptAction,
    RunAction,
    ScheduleRequest,
    SendAction,
    SendRequest,
    VerbErrorKind,
    VerbResponse,
    action_argv,
    parse_action,
    parse_request,
)
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit


def test_parse_action_send_joins_words_like_echo() -> None:
    assert parse_action(["send", "hello", "world"]) == SendAction(text="hello world")


def test_parse_action_run_keeps_script_and_arguments() -> None:
    assert parse_action(["run", "backup.sh", "--full"]) == RunAction(args=("backup.sh", "--full"))


@pytest.mark.parametrize("verb", ["query", "list", "cancel", "schedule"])
def test_parse_action_refuses_verbs_that_cannot_be_deferred(verb: str) -> None:
    with pytest.raises(DefinitionError, match="only send, prompt or run") as caught:
        parse_action([verb, "x"])
    assert caught.value.field == "argv"


@pytest.mark.parametrize("argv", [[], ["frobnicate", "x"], ["send"], ["run"]])
def test_parse_action_refuses_missing_or_unknown_verbs_and_empty_arguments(
    argv: list[str],
) -> None:
    with pytest.raises(DefinitionError):
        parse_action(argv)


def test_action_argv_round_trips_through_parse_action() -> None:
    for argv in (["send", "hi there"], ["prompt", "digest"], ["run", "a.sh", "1"]):
        assert action_argv(parse_action(argv)) == argv
    assert isinstance(parse_action(["prompt", "x"]), PromptAction)


@pytest.mark.parametrize(
    "timing",
    [{}, {"in": "2s", "at": "2026-12-01T08:00"}, {"in": "2s", "cron": "* * * * *"}],
)
def test_schedule_without_exactly_one_timing_flag_is_refused(timing: dict[str, str]) -> None:
    with pytest.raises(DefinitionError, match="exactly one of --in, --at, --cron") as caught:
        ScheduleRequest.model_validate({**timing, "argv": ["send", "hi"]})
    assert caught.value.field == "timing"


def test_schedule_request_reads_in_alias_and_validates_inner_verb() -> None:
    request = parse_request({"verb": "schedule", "in": "2s", "argv": ["send", "hi"]})
    assert isinstance(request, ScheduleRequest)
    assert request.in_ == "2s"
    assert request.action == SendAction(text="hi")
    with pytest.raises(DefinitionError, match="cannot be scheduled"):
        parse_request({"verb": "schedule", "in": "2s", "argv": ["query", "hi"]})


def test_schedule_request_dumps_to_the_wire_shape_the_daemon_parses() -> None:
    request = ScheduleRequest.model_validate(
        {"cron": "0 8 * * *", "name": "digest", "update": True, "argv": ["prompt", "d"]}
    )
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert body["cron"] == "0 8 * * *" and "in" not in body
    assert parse_request(body) == request


def test_parse_request_names_an_unknown_verb_in_field_verb() -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_request({"verb": "reboot"})
    assert caught.value.field == "verb"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"verb": "send"}, "text"),
        ({"verb": "send", "text": "x", "extra": 1}, "extra"),
        ({"verb": "cancel", "name": "no spaces"}, "name"),
        ({"verb": "send", "text": "x", "chat": "../etc"}, "chat"),
    ],
)
def test_parse_request_names_the_bad_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_request(body)
    assert caught.value.field == field


def test_parse_request_builds_the_verbs_model() -> None:
    assert parse_request({"verb": "send", "text": "hi"}) == SendRequest(text="hi")
    assert parse_request({"verb": "cancel", "name": "n1", "chat": "me"}) == CancelRequest(
        name="n1", chat="me"
    )


def test_verb_response_failure_carries_code_message_and_field() -> None:
    response = VerbResponse.failure(VerbErrorKind.CONFLICT, "taken", "name")
    assert not response.ok
    assert response.error is not None and response.error.code is VerbErrorKind.CONFLICT
    assert response.model_dump(mode="json", exclude_none=True) == {
        "ok": False,
        "error": {"code": "conflict", "message": "taken", "field": "name"},
    }
