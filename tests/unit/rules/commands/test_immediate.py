"""Immediate verbs' outbox entries and the daemon's grant: deterministic, so retries dedupe."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pipeline.rules.authz import Action, Grant, authorize
from pipeline.rules.commands import grant_id_for
from pipeline.rules.commands.immediate import (
    CONTROL_PURPOSE,
    answer_entry,
    daemon_grant,
    immediate_entry,
)
from pipeline.rules.keys import derived_delivery_key, request_delivery_key

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_immediate_send_is_keyed_by_its_request_and_due_now() -> None:
    entry = immediate_entry(
        tenant_id="t", user_id="u", verb="send", request_id="r1", chat="me", now=NOW, text="hi"
    )
    assert entry.delivery_key == request_delivery_key(
        tenant_id="t", user_id="u", verb="send", request_id="r1"
    )
    assert entry.due_at == NOW and entry.purpose == CONTROL_PURPOSE
    assert entry.trigger == {"kind": "request", "request_id": "r1"}


def test_prompt_answer_key_derives_from_the_prompts_request_key() -> None:
    prompt = immediate_entry(
        tenant_id="t", user_id="u", verb="prompt", request_id="r1", chat="me", now=NOW
    )
    entry = answer_entry(prompt, "a", NOW)
    prompt_key = request_delivery_key(tenant_id="t", user_id="u", verb="prompt", request_id="r1")
    assert entry.delivery_key == derived_delivery_key(prompt_key, "answer")
    assert (entry.verb, entry.text) == ("send", "a")


def test_daemon_grant_is_the_same_request_for_the_same_chats_in_any_order() -> None:
    first, spec = daemon_grant("t", "u", ["ops", "me"])
    again, _ = daemon_grant("t", "u", ["me", "ops"])
    other, _ = daemon_grant("t", "u", ["me"])
    assert first == again != other
    assert grant_id_for(first) == grant_id_for(again)
    assert set(spec.sources) == {"control", "schedule:me", "schedule:ops"}


@pytest.mark.parametrize("action", [Action.EVALUATE, Action.DELIVER, Action.MANAGE])
def test_daemon_grant_covers_schedules_and_immediate_verbs_of_its_chats(action: Action) -> None:
    request_id, spec = daemon_grant("t", "u", ["me"])
    grant = Grant(grant_id=grant_id_for(request_id), **spec.model_dump(exclude={"tools"}))
    for source in ("control", "schedule:me"):
        decision = authorize(
            [grant],
            tenant_id="t",
            user_id="u",
            purpose=CONTROL_PURPOSE,
            action=action,
            source_id=source,
            target="me",
            now=NOW,
        )
        assert decision.allowed, decision
    elsewhere = authorize(
        [grant],
        tenant_id="t",
        user_id="u",
        purpose=CONTROL_PURPOSE,
        action=action,
        source_id="schedule:me",
        target="ops",
        now=NOW,
    )
    assert not elsewhere.allowed
