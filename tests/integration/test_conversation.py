"""The conversation end to end (issue 30's "Must show", issue 27's chain of fired prompts): the
real ``vigil daemon`` reads a Telegram double's ``getUpdates``, a scripted agent (a shell
script) answers each message by running ``vigil``, and the whole pipeline — command processor,
ticker, evaluator, delivery — delivers what it schedules back to the same chat.

A conversation is (subject, chat): every agent run in a chat — a reply to a message or a fired
prompt — acts for it, so a later turn updates, lists and cancels what an earlier one scheduled,
and the per-conversation caps bound a chain of fired prompts that each schedule more.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Final

import pytest

from tests.integration.test_control_plane import CHAT_IDS, VIGIL, Stack, _wait
from tests.names import fresh
from tests.receiver import Receiver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

BOT_TOKEN: Final = "123:control-plane-test"  # the token test_control_plane's Stack configures
STRANGER: Final = 777_000  # a chat id no [chats] table names
CAP: Final = 3  # [limits] session_schedules: live schedules per conversation
AGENT: Final = """\
#!/bin/sh
# A scripted agent: the message (or fired prompt) on stdin, one vigil verb per sentence.
V="{vigil}"
text=$(cat)
echo "$text" >> "{root}/agent.log"
case "$text" in
  "remind me in 3 seconds to stretch")
    $V schedule --in 3s --name stretch -- send stretch >/dev/null && echo "in 3 seconds" ;;
  "remind me again in an hour")
    $V schedule --in 1h --name stretch --update -- send "stretch again" >/dev/null \\
      && echo "moved to an hour" ;;
  "make that two hours")
    $V schedule --in 2h --name stretch --update -- send "stretch later" >/dev/null \\
      && echo "moved to two hours" ;;
  "what reminders do I have? cancel them")
    $V list --json | tr -d '\\n'; echo
    $V cancel --name stretch >/dev/null && echo "cancelled stretch" ;;
  chain*)
    [ -e "{root}/chain.stop" ] && {{ echo "chain stopped"; exit 0; }}
    for i in 1 2 3; do
      if $V schedule --in 1s -- prompt chain >/dev/null 2>"{root}/chain.$$.err"; then
        echo ok >> "{root}/chain.log"
      else
        echo "refused $(cat "{root}/chain.$$.err")" >> "{root}/chain.log"
      fi
    done
    echo "chain link" ;;
  *) echo "I did not get that" ;;
esac
"""


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver(bot_token=BOT_TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_url: str,
    receiver: Receiver,
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("conversation")
    found = Stack(root, fresh("cv"), receiver, kafka_bootstrap, redis_url)
    found.env["VIGIL_INSTANCE__STATE_DIR"] = str(root / "state")
    agent = root / "agent.sh"
    agent.write_text(AGENT.format(vigil=" ".join(VIGIL), root=root))
    agent.chmod(0o700)
    config = re.sub(r"(?m)^command = \[.*\]$", f'command = ["{agent}"]', found.config.read_text())
    found.config.write_text(config + f"\n[limits]\nsession_schedules = {CAP}\n")
    created = found.vigil("topics", "create")
    assert created.returncode == 0, created.stderr
    found.start_all()
    try:
        yield found
    finally:
        (root / "chain.stop").touch()
        found.stop_all()


def _agent_saw(stack: Stack) -> list[str]:
    log = stack.root / "agent.log"
    return log.read_text().splitlines() if log.exists() else []


def _say(stack: Stack, text: str, answer: str, chat: str = "me") -> None:
    """Write ``text`` in ``chat`` and wait for the agent's ``answer`` there."""
    stack.receiver.message(CHAT_IDS[chat], text)
    stack.wait_text(lambda t: t.startswith(answer), chat=chat, timeout=120)


def test_a_conversation_schedules_updates_lists_and_cancels_across_turns_and_restarts(
    stack: Stack,
) -> None:
    _say(stack, "remind me in 3 seconds to stretch", "in 3 seconds")
    # The reminder, in the same chat (flagged late if the pipeline was slow to fire it).
    stack.wait_text(lambda t: t.split("\n")[0] == "stretch", timeout=120)

    stack.receiver.message(STRANGER, "remind me again in an hour")  # another chat: ignored
    _say(stack, "remind me again in an hour", "moved to an hour")
    [entry] = stack.listed("me")
    assert (entry["name"], entry["argv"]) == ("stretch", ["send", "stretch again"])

    stack.stop("daemon")  # restarted between two messages: the second waits in the double
    stack.receiver.message(CHAT_IDS["me"], "make that two hours")
    before = stack.log("daemon").count("control grant")
    stack.start("daemon")
    _wait(lambda: stack.log("daemon").count("control grant") > before, 90, "the daemon again")
    stack.wait_text(lambda t: t == "moved to two hours", timeout=120)  # a live one, turn 2's
    [entry] = stack.listed("me")
    assert entry["argv"] == ["send", "stretch later"]
    shown = json.loads(stack.vigil("watch", "show", "schedule:me:stretch", "--json").stdout)
    assert shown["session_id"] == "conversation:me"

    _say(stack, "what reminders do I have? cancel them", "[")
    answer = stack.wait_text(lambda t: "cancelled stretch" in t, timeout=60)
    assert '"name": "stretch"' in answer and "stretch later" in answer
    assert stack.listed("me") == []

    saw = _agent_saw(stack)
    for text in (
        "remind me in 3 seconds to stretch",
        "remind me again in an hour",
        "make that two hours",
        "what reminders do I have? cancel them",
    ):
        assert saw.count(text) == 1, saw  # neither lost nor repeated, the restart included
    assert stack.texts("me").count("moved to an hour") == 1
    stranger = [m for m in stack.receiver.messages() if m.get("chat_id") == STRANGER]
    assert stranger == []  # nothing answered the unknown chat
    inboxes = list((stack.root / "state" / "chats").glob("*.json"))
    assert inboxes and all(p.stat().st_mode & 0o777 == 0o600 for p in inboxes)


def test_a_chain_of_fired_prompts_that_each_schedule_more_is_bounded_by_the_conversation_cap(
    stack: Stack,
) -> None:
    _say(stack, "chain", "chain link", chat="ops")
    chain = stack.root / "chain.log"
    capped = f"already has {CAP} live schedules"
    most, results = 0, []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        live = [e for e in stack.listed("ops") if e["argv"] == ["prompt", "chain"]]
        most = max(most, len(live))
        results = chain.read_text().splitlines() if chain.exists() else []
        if sum(capped in line for line in results) >= 2 * CAP:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"the chain was never capped: {results}")
    (stack.root / "chain.stop").touch()
    assert most <= CAP, most  # fresh sessions per fired prompt would triple each generation
    assert results.count("ok") >= CAP + 1  # fired prompts went on scheduling within the cap
    assert _agent_saw(stack).count("chain") >= 3  # the message, then fired prompts
    assert stack.listed("me") == []  # the other conversation holds nothing of the chain
