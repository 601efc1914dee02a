"""Budget counters in Redis: one Lua script per charge, idempotent per token and window.

Owns :class:`RedisBudgets`: the key layout, the charge (``budget_charge.lua``), a batch of
charges in one round trip per hash slot, usage read from each subject's window index, and
erasing a subject's keys; Redis failures become ``BudgetStoreError`` (the caller defers). Leaves
out the rules (``pipeline.rules.budgets``) and what a verdict means.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from importlib.resources import files
from types import MappingProxyType

import redis
import rfc8785
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from pipeline.redis.connect import connect, is_cluster
from pipeline.rules.budgets import (
    MAX_AMOUNT,
    BudgetCaps,
    BudgetCheck,
    BudgetScope,
    BudgetVerdict,
    Charge,
    Dimension,
    window_end,
    window_start,
)
from pipeline.rules.errors import BudgetStoreError, DefinitionError
from pipeline.rules.instants import utc

__all__ = ["DEFAULT_KEY_PREFIX", "EXPIRY_GRACE", "RedisBudgets"]

DEFAULT_KEY_PREFIX = "vigil:budget:"
# Keys outlive their window a little, so a worker whose clock lags still finds its tokens.
EXPIRY_GRACE = timedelta(minutes=5)

_MS = timedelta(milliseconds=1)
_SCRIPT = files("pipeline.redis").joinpath("budget_charge.lua").read_text(encoding="utf-8")
# The single-charge script as a function of its own KEYS and ARGV, called once per charge with
# two keys (its window's hash, its subject's window index) and the ARGV it would be given alone.
# A batch sends each key once and each window's caps once: ARGV[1] is now; ARGV[2] the groups,
# each [milliseconds the hash lives, window end, dimension, cap, dimension, cap, ...]; ARGV[3] the
# charges, each [token, window key's index in KEYS, index key's index, group, amount, ...] (one
# amount per dimension of its group). Every text travels as a string, as ARGV does (amounts
# must stay exact decimal text); indexes are JSON numbers. Each reply is
# "verdict:exhausted:used:used…"; replies are joined by ",".
_BATCH_SCRIPT = f"""
local function charge_one(KEYS, ARGV)
{_SCRIPT}
end

local now = ARGV[1]
local groups = cjson.decode(ARGV[2])
local charges = cjson.decode(ARGV[3])
local replies = {{}}
for i = 1, #charges do
  local charge = charges[i]
  local group = groups[charge[4]]
  local argv = {{charge[1], group[1], group[2], now}}
  for d = 3, #group, 2 do
    argv[#argv + 1] = group[d]
    argv[#argv + 1] = group[d + 1]
    argv[#argv + 1] = charge[5 + (d - 3) / 2]
  end
  replies[i] = table.concat(charge_one({{KEYS[charge[2]], KEYS[charge[3]]}}, argv), ":")
end
return table.concat(replies, ",")
"""
_ERASE_BATCH = 500
_Entry = tuple[tuple[str, str], str, int, list[str]]
"""One charge of a batch: its window's and subject's index keys, token, group (from 1), amounts."""
_VERDICTS = {verdict.value: verdict for verdict in BudgetVerdict}


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@contextmanager
def _translated(action: str) -> Iterator[None]:
    """Every Redis failure, as the one error callers handle (no URL: it may hold a password)."""
    try:
        yield
    except redis.RedisError as exc:
        raise BudgetStoreError(f"budget store failed to {action}: {type(exc).__name__}") from exc


def _amounts(increment: Mapping[Dimension, int]) -> list[str]:
    """The amounts as the script reads them, each validated before anything reaches Redis."""
    amounts = []
    for dimension, amount in increment.items():
        exact = amount.__class__ is int  # the common case, checked first
        if not exact and (isinstance(amount, bool) or not isinstance(amount, int)):
            raise DefinitionError(f"must be an integer in 0..{MAX_AMOUNT}", dimension.value)
        if not 0 <= amount <= MAX_AMOUNT:
            raise DefinitionError(f"must be an integer in 0..{MAX_AMOUNT}", dimension.value)
        amounts.append(str(amount))
    return amounts


class RedisBudgets:
    """Per-watcher, per-window budget counters. Thin: no network until the first call.

    A batch is one ``EVALSHA`` of a script that runs the single-charge script once per
    :class:`~pipeline.rules.budgets.Charge`, with the same keys and tokens, so a token charges once
    per window whichever path sends it; the batch sends each key, and each window's caps, once.
    Only the dimensions a charge increments travel and are checked (a delivery spends deliveries
    and attempts; an exhausted evaluation budget must not stop it). Each charge is atomic and
    idempotent on its own; a batch need not be atomic as a whole.

    Key layout: ``<prefix>{<hex(subject)>}:<hex(watcher_id)>:<window seconds>:<window start>``, one
    hash per scope and window, where ``<prefix>`` is ``<namespace>:budget:`` and ``subject`` the
    canonical JSON ``["<tenant_id>","<user_id>"]``. Hex has no ``:``, braces or glob characters, so
    ``<prefix>{<hex(subject)>}:*`` matches that subject's keys only; the braces are a Redis Cluster
    hash tag. ``<prefix>{<hex(subject)>}:windows`` is the subject's window index: its window hashes
    scored by window end, ended ones dropped as new windows are filed.
    """

    def __init__(self, client: redis.Redis, *, key_prefix: str = DEFAULT_KEY_PREFIX) -> None:
        self._client = client
        self._prefix = key_prefix
        self._batch = client.register_script(_BATCH_SCRIPT)
        self._cluster = is_cluster(client)  # a batch goes out as one call per hash slot
        # Window keys by window length: the window's start, and each scope's key in it. A new
        # window replaces its whole map, so keys of gone watchers do not pile up.
        self._keys: dict[timedelta, tuple[datetime, dict[BudgetScope, tuple[str, str]]]] = {}

    @classmethod
    def from_url(
        cls, url: str, *, key_prefix: str = DEFAULT_KEY_PREFIX, quick_retry: bool = False
    ) -> RedisBudgets:
        """A store over a client of ``url`` with short socket timeouts, so an outage is a quick
        ``BudgetStoreError`` (defer) rather than a stalled loop; ``quick_retry``: one immediate
        retry instead of redis-py's backoff (the ticker: an outage defers watchers for a step)."""
        client = connect(url, timeout_s=2.0, retry=Retry(NoBackoff(), 1) if quick_retry else None)
        return cls(client, key_prefix=key_prefix)

    def close(self) -> None:
        self._client.close()

    def subject_prefix(self, tenant_id: str, user_id: str) -> str:
        """The prefix every budget key of exactly this subject starts with."""
        return f"{self._prefix}{{{rfc8785.dumps([tenant_id, user_id]).hex()}}}:"

    def window_key(self, scope: BudgetScope, caps: BudgetCaps, now: datetime) -> str:
        start = int(window_start(now, caps.window).timestamp())
        seconds = int(caps.window.total_seconds())
        subject = self.subject_prefix(scope.tenant_id, scope.user_id)
        return f"{subject}{scope.watcher_id.encode().hex()}:{seconds}:{start}"

    def charge(
        self,
        scope: BudgetScope,
        caps: BudgetCaps,
        increment: Mapping[Dimension, int],
        token: str,
        now: datetime,
    ) -> BudgetCheck:
        """Charge ``increment`` in ``now``'s window, all or nothing, once per ``token``.

        The same token in the same window returns the first verdict and charges nothing more.
        """
        return self.charge_many([Charge(scope, caps, increment, token)], now)[0]

    def charge_many(self, charges: Sequence[Charge], now: datetime) -> list[BudgetCheck]:
        """Every charge in order, in one script call: one round trip for the batch.

        Caps are prepared once per distinct caps of the batch, and window keys once per scope
        and window. Relative to the caller's ``now``, not Redis's clock: a skewed clock shifts
        a key's expiry by the skew only, never to "already expired".
        """
        replies = self._replies(charges, now)
        return [_check(charge, answer) for charge, answer in zip(charges, replies, strict=True)]

    def verdicts_many(self, charges: Sequence[Charge], now: datetime) -> list[BudgetVerdict]:
        """:meth:`charge_many`'s verdicts alone (the evaluator's batch reads nothing else)."""
        return [_VERDICTS[answer.split(":", 1)[0]] for answer in self._replies(charges, now)]

    def _replies(self, charges: Sequence[Charge], now: datetime) -> list[str]:
        """The script's answer to each charge, in order (``verdict:exhausted:used…``)."""
        if not charges:
            return []
        now = utc(now)
        # (caps, dimensions) → its group (from 1) and the window's keys by scope
        Keys = dict[BudgetScope, tuple[str, str]]
        known: dict[tuple[int, tuple[Dimension, ...]], tuple[int, Keys]] = {}
        group_specs: list[list[str]] = []
        entries: list[_Entry] = []
        for scope, caps, increment, token in charges:
            amounts = _amounts(increment)
            dimensions = tuple(increment)
            found = known.get((id(caps), dimensions))
            if found is None:
                end = window_end(now, caps.window)
                spec = [str((end + EXPIRY_GRACE - now) // _MS), str(int(end.timestamp()))]
                for dimension in dimensions:
                    cap = caps.cap(dimension)
                    spec += (dimension.value, "-1" if cap is None else str(cap))
                group_specs.append(spec)
                found = (len(group_specs), self._window_keys(caps, now))
                known[(id(caps), dimensions)] = found
            group, window_keys = found
            keys = window_keys.get(scope)
            if keys is None:
                key = self.window_key(scope, caps, now)
                keys = window_keys[scope] = (key, self._index_key(key))
            entries.append((keys, token, group, amounts))
        with _translated("charge a budget"):
            reply = self._send(entries, str(int(now.timestamp())), group_specs)
        if len(reply) != len(charges):
            raise BudgetStoreError(f"budget store answered {len(reply)} of {len(charges)}")
        return reply

    def _send(self, entries: list[_Entry], now: str, groups: list[list[str]]) -> list[str]:
        """The batch script's replies, in order: one call, or on a Redis Cluster one call per
        hash slot (a subject's keys share one: its hash tag), answers put back in order."""
        if not self._cluster:
            return self._call(entries, now, groups)
        by_slot: dict[int, list[int]] = {}
        for index, entry in enumerate(entries):
            by_slot.setdefault(key_slot(entry[0][0].encode()), []).append(index)
        reply = [""] * len(entries)
        for indexes in by_slot.values():
            answers = self._call([entries[i] for i in indexes], now, groups)
            if len(answers) != len(indexes):
                return answers  # the caller reports the short answer
            for i, answer in zip(indexes, answers, strict=True):
                reply[i] = answer
        return reply

    def _call(self, entries: list[_Entry], now: str, groups: list[list[str]]) -> list[str]:
        """One script call: each key sent once, each charge naming its keys by index."""
        place: dict[str, int] = {}  # a key's position in KEYS (from 1)
        keys: list[str] = []
        charges: list[list[str | int]] = []
        for (key, index_key), token, group, amounts in entries:
            window = place.get(key)
            if window is None:
                keys.append(key)
                window = place[key] = len(keys)
            index = place.get(index_key)
            if index is None:
                keys.append(index_key)
                index = place[index_key] = len(keys)
            charges.append([token, window, index, group, *amounts])
        args = [now, _json(groups), _json(charges)]
        return _text(self._batch(keys=keys, args=args)).split(",")

    def _index_key(self, window_key: str) -> str:
        """The window index of the subject a window key belongs to (the same hash tag, so the
        same slot on a Redis Cluster)."""
        return window_key[: window_key.index("}:") + 2] + "windows"

    def index_key(self, tenant_id: str, user_id: str) -> str:
        """The sorted set of a subject's window hashes, scored by window end."""
        return f"{self.subject_prefix(tenant_id, user_id)}windows"

    def _window_keys(self, caps: BudgetCaps, now: datetime) -> dict[BudgetScope, tuple[str, str]]:
        """The keys of ``now``'s window of this length and its subject's index, by scope, kept
        for the rest of the window."""
        start = window_start(now, caps.window)
        found = self._keys.get(caps.window)
        if found is None or found[0] != start:
            found = self._keys[caps.window] = (start, {})
        return found[1]

    def usage(self, scope: BudgetScope, caps: BudgetCaps, now: datetime) -> dict[Dimension, int]:
        """What ``now``'s window has used so far, per dimension."""
        fields = [f"c:{d.value}" for d in Dimension]
        with _translated("read budget usage"):
            values = self._client.hmget(self.window_key(scope, caps, now), fields)
        pairs = zip(Dimension, values, strict=True)
        return {d: int(_text(v)) if v is not None else 0 for d, v in pairs}

    def subject_usage(
        self, tenant_id: str, user_id: str, now: datetime, *, max_keys: int = 10_000
    ) -> dict[Dimension, int]:
        """What the subject's watchers have used in the windows that hold ``now``, summed per
        dimension: the windows its index files as not yet ended (at most ``max_keys``; a bounded
        figure for a status line), never a scan of the keyspace."""
        now_s = utc(now).timestamp()
        fields = [f"c:{d.value}" for d in Dimension]
        totals = dict.fromkeys(Dimension, 0)
        index = self.index_key(tenant_id, user_id)
        with _translated("read a subject's budget usage"):
            found = self._client.zrangebyscore(index, now_s, "+inf", start=0, num=max_keys)
            current: list[str] = []
            for item in found:
                key = _text(item) if isinstance(item, bytes | str) else ""
                parts = key.rsplit(":", 2)  # …:<window seconds>:<window start>
                try:
                    length, begin = int(parts[-2]), int(parts[-1])
                except (ValueError, IndexError):
                    continue
                if begin <= now_s < begin + length:
                    current.append(key)
            pipe = self._client.pipeline(transaction=False)
            for key in current:
                pipe.hmget(key, fields)
            for values in pipe.execute():
                for dimension, value in zip(Dimension, values, strict=True):
                    totals[dimension] += int(_text(value)) if value is not None else 0
        return totals

    def erase_subject(self, tenant_id: str, user_id: str) -> int:
        """Delete every budget key of exactly this subject; returns how many were deleted."""
        pattern = f"{self.subject_prefix(tenant_id, user_id)}*"
        deleted = 0
        with _translated("erase a subject's budgets"):
            batch: list[bytes | str] = []
            for key in self._client.scan_iter(match=pattern, count=_ERASE_BATCH):
                batch.append(key)
                if len(batch) >= _ERASE_BATCH:
                    deleted += int(self._client.unlink(*batch))
                    batch.clear()
            if batch:
                deleted += int(self._client.unlink(*batch))
        return deleted


def _check(charge: Charge, reply: str) -> BudgetCheck:
    """The verdict; ``remaining`` covers the charged dimensions only (what is left of each)."""
    verdict, exhausted, *used = reply.split(":")
    remaining: dict[Dimension, int | None] = {}
    for dimension, spent in zip(charge.increment, used, strict=True):
        cap = charge.caps.cap(dimension)
        remaining[dimension] = None if cap is None else max(0, cap - int(spent))
    return BudgetCheck(
        _VERDICTS[verdict],
        Dimension(exhausted) if exhausted else None,
        MappingProxyType(remaining),
    )
