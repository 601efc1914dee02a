"""The ``redeliver`` command: who may ask, which grant it rechecks, what it writes — pure."""

from __future__ import annotations

import pytest

from pipeline.kafka.serde import default_codec
from pipeline.records.redelivery import decode_redelivery, encode_redelivery
from pipeline.rules.authz import Action, Principal, Role
from pipeline.rules.commands import CommandVerb, Redelivery, ResultCode
from tests.unit.rules.commands.test_apply import (
    NOW,
    OPERATOR,
    TENANT,
    USER,
    Subject,
    agent,
    definition,
    grant_record,
)

pytestmark = pytest.mark.unit

KEY = "ab" * 32


def _with_watcher(*actions: Action) -> Subject:
    """A subject with watcher ``w-1`` (created under ``manage``) and a grant of ``actions``."""
    subject = Subject()
    subject.ok(CommandVerb.CREATE, definition=definition())
    subject.grants = {"g-1": grant_record(*actions)}
    return subject


def test_redeliver_by_the_owner_writes_one_request_for_the_key_and_subject() -> None:
    subject = _with_watcher(Action.MANAGE, Action.DELIVER)
    outcome = subject.run(CommandVerb.REDELIVER, delivery_key=KEY, watcher_id="w-1")
    assert outcome.result.ok, outcome.result.error
    assert outcome.result.result == {
        "delivery_key": KEY,
        "tenant_id": TENANT,
        "user_id": USER,
        "requested": True,
    }
    (request,) = outcome.redeliveries
    assert (request.delivery_key, request.tenant_id, request.user_id) == (KEY, TENANT, USER)
    assert request.request_id == outcome.result.request_id
    assert not (outcome.registry or outcome.watchers or outcome.lifecycle or outcome.outbox)


def test_redeliver_rechecks_the_exact_grant_of_the_watcher_fail_closed() -> None:
    subject = _with_watcher(Action.MANAGE)  # no deliver
    assert subject.refused(CommandVerb.REDELIVER, delivery_key=KEY, watcher_id="w-1") == (
        ResultCode.DENIED,
        None,
    )
    subject.grants = {"g-1": grant_record(Action.DELIVER, targets=("in-app",))}
    code, _ = subject.refused(CommandVerb.REDELIVER, delivery_key=KEY, watcher_id="w-1")
    assert code is ResultCode.DENIED, "a grant that does not name the watcher's target"


def test_redeliver_without_a_known_watcher_needs_some_deliver_grant_of_the_subject() -> None:
    subject = Subject(grants={"g-1": grant_record(Action.MANAGE)})
    code, _ = subject.refused(CommandVerb.REDELIVER, delivery_key=KEY)
    assert code is ResultCode.DENIED
    subject.grants = {"g-1": grant_record(Action.DELIVER)}
    assert subject.ok(CommandVerb.REDELIVER, delivery_key=KEY)["requested"] is True


def test_an_operator_may_redeliver_for_a_subject_and_an_agent_may_not() -> None:
    subject = _with_watcher(Action.MANAGE, Action.DELIVER)
    assert subject.ok(CommandVerb.REDELIVER, OPERATOR, delivery_key=KEY)["delivery_key"] == KEY
    code, _ = subject.refused(CommandVerb.REDELIVER, agent(), delivery_key=KEY)
    assert code is ResultCode.DENIED
    chat = Principal(
        name="chat", role=Role.SCOPED_CHAT, tenant_id=TENANT, user_id=USER, session_id="s-1"
    )
    assert subject.refused(CommandVerb.REDELIVER, chat, delivery_key=KEY)[0] is ResultCode.DENIED


def test_another_tenants_delivery_is_not_found() -> None:
    subject = _with_watcher(Action.MANAGE, Action.DELIVER)
    stranger = Principal(name="x", role=Role.MANAGER, tenant_id="other", user_id="m")
    assert subject.refused(CommandVerb.REDELIVER, stranger, delivery_key=KEY) == (
        ResultCode.NOT_FOUND,
        "delivery_key",
    )


def test_redeliver_needs_a_well_formed_delivery_key() -> None:
    subject = _with_watcher(Action.MANAGE, Action.DELIVER)
    assert subject.refused(CommandVerb.REDELIVER) == (ResultCode.INVALID, "delivery_key")
    with pytest.raises(ValueError, match="64 lowercase hex"):
        subject.run(CommandVerb.REDELIVER, delivery_key="AB" * 32)


def test_a_redelivery_record_round_trips_through_its_avro_schema() -> None:
    codec = default_codec()
    request = Redelivery(KEY, TENANT, USER, "r-1", NOW)
    assert decode_redelivery(codec, encode_redelivery(codec, request)) == request
