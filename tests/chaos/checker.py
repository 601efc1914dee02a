"""The one checker every fault scenario and the soak run: what must hold after any fault.

A scenario states its :class:`Expectation` (the delivery keys its load must produce, the answers
its command clients were given, the registry it must end with, the polling watchers whose ticks
count) and :meth:`Checker.verdict` reads what the deployment recorded — ``outbox``,
``delivery-state``, ``command-results``, ``registry``, ``ticks`` and ``receipts`` (committed
records only), Redis's budget windows, and every request the receivers got — and proves:

- every expected delivery key is in the outbox exactly once (``lost``, ``duplicates``), and no
  other key is (``unexpected``);
- every expected key was delivered: its delivery state is ``delivered`` and the receiver got it;
  every key a receiver saw is expected;
- each key's attempts match its delivery state: the receiver got it at most as often as the state
  counts claimed attempts, and Redis holds exactly one charge per attempt (``attempt:<key>:1…n``):
  nothing was sent unbudgeted, nothing charged twice;
- every acknowledged command was applied exactly once: ``command-results`` holds exactly one
  answer per request id, the one its client got, and the registry ends as the scenario says;
- no tick beyond the missed-run policy: per polling watcher each instant once, and (for the
  ``bounded`` policy the scenarios use) every cron instant from activation to the end, no gap;
- no budget charged twice for one idempotency token: each window's evaluation counter equals its
  charged tokens, and those tokens are exactly the committed receipts that were charged.

Left out: producing the load (``tests.chaos.load``) and running processes (``tests.chaos.stack``).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipeline.crypto import KeyRing
from pipeline.kafka.serde import default_codec
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command_result import decode_result
from pipeline.records.delivery_state import DeliveryRecord, decode_record
from pipeline.records.outbox_entry import decode_outbox_entry
from pipeline.records.receipt import decode_receipt
from pipeline.records.registry_entry import decode_entry
from pipeline.redis.connect import connect
from pipeline.rules.budgets import BudgetVerdict, offset_token
from pipeline.rules.commands import CommandResult, RegistryEntry
from pipeline.rules.keys import watcher_key
from pipeline.rules.outcomes import DeliveryStatus
from pipeline.rules.ticker import TickKind
from tests.integration.evaluator_helpers import current_ring
from tests.integration.runtime_helpers import read_all
from tests.receiver import Receiver

__all__ = ["Checker", "Expectation", "TickPlan", "Verdict"]

_LIST = 8  # examples listed per problem


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class TickPlan:
    """A polling watcher whose ticks are checked: every instant of ``instants`` exactly once
    (the ``bounded`` missed-run policy loses none), and no other."""

    key: str  # watcher key
    instants: frozenset[datetime]


@dataclass
class Expectation:
    """What a scenario's load must have produced."""

    deliveries: set[str] = field(default_factory=set)
    keyless: set[str] = field(default_factory=set)  # of deliveries: sent to chats (no key)
    answered: dict[str, CommandResult] = field(default_factory=dict)
    sent: set[str] = field(default_factory=set)
    registry: dict[str, tuple[str, int]] = field(default_factory=dict)  # key → (status, revision)
    ticks: list[TickPlan] = field(default_factory=list)
    settled_statuses: frozenset[DeliveryStatus] = frozenset({DeliveryStatus.DELIVERED})


@dataclass
class Verdict:
    """What the checker found: counts, and every violated property with examples."""

    expected: int = 0
    outbox: int = 0
    lost: int = 0
    duplicates: int = 0
    unexpected: int = 0
    received: int = 0
    undelivered: int = 0
    attempts: int = 0
    requests: int = 0
    commands: int = 0
    ticks: int = 0
    charged_evaluations: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem(self, what: str, examples: Iterable[Any] = ()) -> None:
        listed = list(examples)[:_LIST]
        self.problems.append(f"{what}{f': {listed}' if listed else ''}")

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "expected": self.expected,
            "outbox": self.outbox,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "unexpected": self.unexpected,
            "received": self.received,
            "undelivered": self.undelivered,
            "attempts": self.attempts,
            "requests": self.requests,
            "commands": self.commands,
            "ticks": self.ticks,
            "charged_evaluations": self.charged_evaluations,
            "problems": self.problems,
        }

    def __str__(self) -> str:
        head = ", ".join(f"{k}={v}" for k, v in self.summary().items() if k != "problems")
        return head + "".join(f"\n  - {p}" for p in self.problems)


class Checker:
    """Reads one deployment's records back and judges them (module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        redis_url: str,
        topology: Topology,
        receiver: Receiver,
        *,
        budget_prefix: str = "vigil:budget:",
    ) -> None:
        self.bootstrap = bootstrap
        self.redis_url = redis_url
        self.topology = topology
        self.receiver = receiver
        self.codec = default_codec()
        self.budget_prefix = budget_prefix

    # -- waiting ---------------------------------------------------------------------------

    def wait_settled(
        self,
        expect: Expectation,
        timeout_s: float,
        alive: Callable[[], None] | None = None,
    ) -> bool:
        """Wait until the receiver holds every expected key and their states are settled;
        ``alive()`` is called on each turn (to notice a process that gave up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if alive is not None:
                alive()
            if expect.deliveries - expect.keyless <= self.receiver.distinct_keys():
                break
            time.sleep(1.0)
        while time.monotonic() < deadline:
            states = self.delivery_states()
            if all(
                (found := states.get(k)) is not None
                and found.state.status in expect.settled_statuses
                for k in expect.deliveries
            ):
                return True
            time.sleep(2.0)
        return False

    # -- reading ---------------------------------------------------------------------------

    def _read(self, topic: Topic) -> list[Any]:
        return read_all(self.bootstrap, self.topology.name(topic), max_s=120)

    def _ring(self) -> KeyRing:
        """The data keys ``keys`` holds now (sealed fields open with them; none is shredded in
        a fault scenario, so an unreadable record is a finding, not an erasure)."""
        return current_ring(self.bootstrap, self.topology)

    def outbox_counts(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        ring = self._ring()
        for msg in self._read(Topic.OUTBOX):
            value = msg.value()
            if value is not None:
                counts[decode_outbox_entry(self.codec, ring, value).delivery_key] += 1
        return counts

    def delivery_states(self) -> dict[str, DeliveryRecord]:
        """The latest committed delivery record per key; a purged key (tombstone) keeps the
        record it was purged in (settled, past its retention)."""
        latest: dict[str, DeliveryRecord] = {}
        for msg in self._read(Topic.DELIVERY_STATE):
            value = msg.value()
            if value is not None:
                latest[(msg.key() or b"").decode()] = decode_record(self.codec, value)
        return latest

    def command_results(self) -> dict[str, list[CommandResult]]:
        found: dict[str, list[CommandResult]] = {}
        ring = self._ring()
        for msg in self._read(Topic.COMMAND_RESULTS):
            result = decode_result(self.codec, ring, msg.value() or b"")
            found.setdefault(result.request_id, []).append(result)
        return found

    def registry(self) -> dict[str, RegistryEntry]:
        latest: dict[str, RegistryEntry] = {}
        ring = self._ring()
        for msg in self._read(Topic.REGISTRY):
            key = (msg.key() or b"").decode()
            value = msg.value()
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = decode_entry(self.codec, ring, value)
        return latest

    def ticks(self) -> Counter[tuple[str, int, datetime]]:
        """(watcher key, version, scheduled instant) of every committed poll tick."""
        counts: Counter[tuple[str, int, datetime]] = Counter()
        for msg in self._read(Topic.TICKS):
            _, value = self.codec.decode(msg.value() or b"")
            if value["kind"] != TickKind.POLL.value:
                continue
            key = watcher_key(value["tenant_id"], value["user_id"], value["watcher_id"])
            counts[(key, int(value["watcher_version"]), value["scheduled_at"])] += 1
        return counts

    def charged_receipts(self) -> set[str]:
        """The budget tokens of every committed receipt whose evaluation was charged."""
        tokens = set()
        ring = self._ring()
        for msg in self._read(Topic.RECEIPTS):
            receipt, _ = decode_receipt(self.codec, ring, msg.value() or b"")
            if receipt.budget is not BudgetVerdict.OK or receipt.position is None:
                continue
            topic, partition, offset = receipt.position.rsplit(":", 2)
            key = watcher_key(receipt.tenant_id, receipt.user_id, receipt.watcher_id)
            tokens.add(f"{offset_token(topic, int(partition), int(offset))}:{key}")
        return tokens

    def budget_windows(self) -> dict[str, dict[str, str]]:
        client = connect(self.redis_url)  # vigil's own: a Sentinel URL finds the primary
        try:
            windows: dict[str, dict[str, str]] = {}
            for key in client.scan_iter(match=f"{self.budget_prefix}*", count=1000):
                if _text(key).endswith(":windows"):
                    continue  # a subject's window index (a sorted set), not a window
                fields = client.hgetall(key).items()
                windows[_text(key)] = {_text(k): _text(v) for k, v in fields}
            return windows
        finally:
            client.close()

    # -- judging ---------------------------------------------------------------------------

    def verdict(self, expect: Expectation) -> Verdict:
        verdict = Verdict(expected=len(expect.deliveries))
        states = self.delivery_states()
        self._outbox(verdict, expect)
        self._deliveries(verdict, expect, states)
        charged = self._budgets(verdict, states)
        self._evaluations(verdict, charged)
        self._commands(verdict, expect)
        self._ticks(verdict, expect)
        return verdict

    def _outbox(self, verdict: Verdict, expect: Expectation) -> None:
        counts = self.outbox_counts()
        verdict.outbox = len(counts)
        lost = expect.deliveries - set(counts)
        twice = [k for k, n in counts.items() if n > 1]
        extra = set(counts) - expect.deliveries
        verdict.lost, verdict.duplicates, verdict.unexpected = len(lost), len(twice), len(extra)
        if lost:
            verdict.problem(f"{len(lost)} expected keys missing from the outbox", sorted(lost))
        if twice:
            verdict.problem(f"{len(twice)} keys in the outbox more than once", sorted(twice))
        if extra:
            verdict.problem(f"{len(extra)} outbox keys nobody expected", sorted(extra))

    def _deliveries(
        self, verdict: Verdict, expect: Expectation, states: dict[str, DeliveryRecord]
    ) -> None:
        # A send cut off mid-body (a kill) reaches the receiver torn: it does not count.
        whole = [
            r
            for r in self.receiver.requests
            if r.idempotency_key is not None
            and len(r.body) == int(r.headers.get("content-length", -1))
        ]
        got = Counter(r.idempotency_key for r in whole if r.idempotency_key is not None)
        keyed = expect.deliveries - expect.keyless
        verdict.received = len(set(got) & keyed)
        verdict.requests = sum(got.values())
        unexpected = set(got) - keyed
        if unexpected:
            verdict.problem(f"{len(unexpected)} received keys nobody expected", sorted(unexpected))
        if expect.keyless:  # a chat gets no key: count the messages it accepted instead
            chats = sum(1 for r in self.receiver.requests if "/bot" in r.path and r.status == 200)
            verdict.received += min(chats, len(expect.keyless))
            if chats != len(expect.keyless):
                verdict.problem(
                    f"{chats} chat messages accepted for {len(expect.keyless)} chat deliveries"
                )
        never = keyed - set(got)
        if never:
            verdict.problem(f"{len(never)} expected keys never received", sorted(never))
        unsettled = sorted(
            k
            for k in expect.deliveries
            if (found := states.get(k)) is None or found.state.status not in expect.settled_statuses
        )
        verdict.undelivered = len(unsettled)
        if unsettled:
            shown = [
                (k[:12], states[k].state.status.value if k in states else None) for k in unsettled
            ]
            verdict.problem(f"{len(unsettled)} expected keys not settled", shown)
        over = sorted(
            (k[:12], n, states[k].state.attempt)
            for k, n in got.items()
            if k in states and n > states[k].state.attempt
        )
        if over:
            verdict.problem(f"{len(over)} keys sent more often than their state's attempts", over)
        verdict.attempts = sum(states[k].state.attempt for k in expect.deliveries if k in states)

    def _budgets(self, verdict: Verdict, states: dict[str, DeliveryRecord]) -> set[str]:
        """Check every window's counters against its tokens; returns the evaluation tokens."""
        evaluation_tokens: set[str] = set()
        attempts: dict[str, set[int]] = {}
        seen_twice: list[str] = []
        for key, fields in self.budget_windows().items():
            ok_eval = ok_attempts = ok_firsts = 0
            for name, reply in fields.items():
                if not name.startswith("t:"):
                    continue
                token = name[2:]
                charged = reply.startswith('["ok"')
                if token.startswith("offset:"):
                    if token in evaluation_tokens:
                        seen_twice.append(token)
                    if charged:
                        evaluation_tokens.add(token)
                        ok_eval += 1
                elif token.startswith("attempt:"):
                    _, delivery, number = token.split(":")
                    if charged:
                        if int(number) in attempts.setdefault(delivery, set()):
                            seen_twice.append(token)
                        attempts[delivery].add(int(number))
                        ok_attempts += 1
                        ok_firsts += number == "1"
            counters = {
                "evaluations": ok_eval,
                "attempts": ok_attempts,
                "deliveries": ok_firsts,
            }
            for dimension, tokens in counters.items():
                counted = int(fields.get(f"c:{dimension}", 0))
                if counted != tokens:
                    verdict.problem(
                        f"budget window {key[-40:]}: {dimension} counter {counted} but "
                        f"{tokens} charged tokens"
                    )
        if seen_twice:
            verdict.problem(f"{len(seen_twice)} tokens charged in two windows", seen_twice)
        wrong = sorted(
            (k[:12], sorted(attempts.get(k, set())), record.state.attempt)
            for k, record in states.items()
            if attempts.get(k, set()) != set(range(1, record.state.attempt + 1))
        )
        if wrong:
            verdict.problem(
                f"{len(wrong)} keys whose charged attempts differ from their state's", wrong
            )
        return evaluation_tokens

    def _evaluations(self, verdict: Verdict, charged: set[str]) -> None:
        receipts = self.charged_receipts()
        verdict.charged_evaluations = len(charged)
        orphan = charged - receipts
        unpaid = receipts - charged
        if orphan:
            verdict.problem(f"{len(orphan)} evaluation charges with no receipt", sorted(orphan))
        if unpaid:
            verdict.problem(f"{len(unpaid)} charged receipts with no charge", sorted(unpaid))

    def _commands(self, verdict: Verdict, expect: Expectation) -> None:
        if not expect.sent:
            return
        results = self.command_results()
        verdict.commands = len(expect.answered)
        unanswered = expect.sent - set(expect.answered)
        if unanswered:
            verdict.problem(f"{len(unanswered)} commands never answered", sorted(unanswered))
        twice = sorted(r for r, found in results.items() if len(found) > 1)
        if twice:
            verdict.problem(f"{len(twice)} commands answered more than once", twice)
        differ = sorted(
            r
            for r, answer in expect.answered.items()
            if [(f.ok, f.error) for f in results.get(r, [])] != [(answer.ok, answer.error)]
        )
        if differ:
            verdict.problem(f"{len(differ)} answers that command-results does not hold", differ)
        # The evaluator's own ``close`` commands (expiry, satisfied once watches) are answered
        # too, and so are the ``key`` requests a client makes before it seals its first command
        # of a subject; anything else is a command nobody sent.
        strangers = sorted(
            r
            for r, found in results.items()
            if r not in expect.sent
            and not r.startswith("close:")
            and not all(f.verb == "key" for f in found)
        )
        if strangers:
            verdict.problem(f"{len(strangers)} results of commands nobody sent", strangers)
        if expect.registry:
            registry = self.registry()
            wrong = sorted(
                (key, (e.status.value, e.revision) if (e := registry.get(key)) else None, want)
                for key, want in expect.registry.items()
                if (e := registry.get(key)) is None or (e.status.value, e.revision) != want
            )
            if wrong:
                verdict.problem(f"{len(wrong)} registry entries not as commanded", wrong)

    def _ticks(self, verdict: Verdict, expect: Expectation) -> None:
        if not expect.ticks:
            return
        counts = self.ticks()
        verdict.ticks = sum(counts.values())
        twice = sorted((k[0][-30:], k[2].isoformat()) for k, n in counts.items() if n > 1)
        if twice:
            verdict.problem(f"{len(twice)} poll instants ticked more than once", twice)
        by_watcher: dict[str, set[datetime]] = {}
        for key, _version, at in counts:
            by_watcher.setdefault(key, set()).add(at)
        lost: list[tuple[str, str]] = []
        beyond: list[tuple[str, str]] = []
        for plan in expect.ticks:
            got = by_watcher.get(plan.key, set())
            lost += [(plan.key[-30:], at.isoformat()) for at in sorted(plan.instants - got)]
            beyond += [(plan.key[-30:], at.isoformat()) for at in sorted(got - plan.instants)]
        if lost:
            verdict.problem(f"{len(lost)} poll instants never ticked", lost)
        if beyond:
            verdict.problem(f"{len(beyond)} ticks at instants not due", beyond)
