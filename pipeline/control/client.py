"""Send one command over Kafka and wait for its answer: the control plane's client core.

Owns :class:`CommandClient`: a command to ``commands`` (keyed by subject), then its answer read from
``command-results`` (the request's partition, from its prior end) until that request id's record or
the timeout (:class:`BrokerError`); subject content sealed with the subject's followed keys (DESIGN
§10). Left out: deciding commands (``consumers.commands``) and authenticating callers (the principal
is asserted)."""

from __future__ import annotations

import threading
import time
import uuid
from types import TracebackType
from typing import Any, Final

from pipeline.clock import Clock, SystemClock
from pipeline.crypto import KeyEncryptionKeys, KeyRing
from pipeline.kafka.clients import Producer
from pipeline.kafka.failover import FAILOVER_WAIT_S
from pipeline.kafka.partitioner import partition_for
from pipeline.kafka.serde import AvroCodec, default_codec
from pipeline.kafka.tail import Tail
from pipeline.kafka.topics import Topic, Topology
from pipeline.records.command import encode_command
from pipeline.records.command_result import decode_result
from pipeline.rules.authz import Principal, Role
from pipeline.rules.commands import Command, CommandResult, CommandVerb
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import BrokerError, ErasedError, SerdeError
from pipeline.runtime.keys import FollowedKeys
from pipeline.runtime.processing import Message

__all__ = ["DEFAULT_TIMEOUT_S", "CommandClient", "new_request_id", "operator_principal"]

DEFAULT_TIMEOUT_S: Final = 15.0


def new_request_id() -> str:
    return uuid.uuid4().hex


def operator_principal(tenant_id: str, user_id: str, *, name: str | None = None) -> Principal:
    """An operator identity at an authenticated edge (DESIGN.md §10: only edges with Kafka
    credentials may produce to ``commands``; ACLs enforce it on shared clusters): the CLI's
    explicit ``--as-operator`` (``[operator] name``), the daemon ensuring its own grant."""
    return Principal(
        name=name or f"operator:{tenant_id}/{user_id}",
        role=Role.OPERATOR,
        tenant_id=tenant_id,
        user_id=user_id,
    )


class CommandClient:
    """Round trips to the command processor. No network until the first :meth:`send`.

    Sending and finding the channel's end wait out a leader move (``pipeline.kafka.failover``).
    Before sealing a definition or a text it reads the subject's ``keys`` partition on to its end
    (:class:`~pipeline.runtime.keys.FollowedKeys`: a shredded key is never used again; with none, it
    asks the processor for one with verb ``key``); results open with the same ring, re-read once
    when they name an unseen key.

    Thread-safe: concurrent :meth:`send` calls take turns (one reader follows one result
    partition at a time); a control-plane command is a short round trip, so turns are cheap.
    """

    def __init__(
        self,
        bootstrap: str,
        topology: Topology,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Clock | None = None,
        codec: AvroCodec | None = None,
        keks: KeyEncryptionKeys | None = None,
    ) -> None:
        """``keks`` default to ``$VIGIL_MASTER_KEYS`` (none there: a ``ConfigError``)."""
        self._bootstrap = bootstrap
        self._topology = topology
        self._timeout_s = timeout_s
        self._clock = clock or SystemClock()
        self._codec = codec or default_codec()
        self._ring = KeyRing(keks or KeyEncryptionKeys.load(), self._codec, cache_size=4096)
        self._keys = FollowedKeys(bootstrap, topology, self._ring)
        # Producing a command and finding the result channel's end ride out a leader move
        # (FAILOVER_WAIT_S); ``timeout_s`` is how long the answer may take once it is sent.
        self._producer = Producer(bootstrap, {"message.timeout.ms": int(FAILOVER_WAIT_S * 1000)})
        self._results = Tail(bootstrap, "vigil-cli", FAILOVER_WAIT_S)
        self._lock = threading.Lock()

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._results.close()
            self._producer.close()

    def command(
        self,
        verb: CommandVerb,
        principal: Principal,
        tenant_id: str,
        user_id: str,
        **fields: Any,
    ) -> Command:
        """A new command with a fresh request id, issued now."""
        return Command(
            request_id=new_request_id(),
            verb=verb,
            principal=principal,
            tenant_id=tenant_id,
            user_id=user_id,
            issued_at=self._clock.now(),
            **fields,
        )

    def send(self, command: Command, *, retries: int = 0) -> CommandResult:
        """Produce ``command`` and wait for its result (an error result is returned, not
        raised); :class:`BrokerError` when Kafka fails or no answer comes in time.

        ``retries``: after a timeout, wait again that many times, each time reading the result
        channel again from where it stood before the command was produced. The command is never
        produced twice: once the broker acknowledged it, the processor applies it exactly once
        (a restarted processor resumes from its committed offset), so the answer comes late,
        never twice, and a second copy would be a second command.
        """
        with self._lock:
            if command.definition is not None or command.text is not None:
                refused = self._ensure_key(command, retries)
                if refused is not None:
                    return refused
            return self._round_trip(command, retries)

    def _ensure_key(self, command: Command, retries: int) -> CommandResult | None:
        """Make sure the subject's data key is in the ring; a refused ``key`` command's result
        when the processor will not make one for this principal."""
        owner = subject_owner(command.tenant_id, command.user_id)
        self._load_keys(command)
        if self._ring.record(owner) is not None:
            return None
        asked = self._round_trip(
            self.command(CommandVerb.KEY, command.principal, command.tenant_id, command.user_id),
            retries,
        )
        if not asked.ok:
            return asked.model_copy(update={"request_id": command.request_id})
        self._load_keys(command)
        if self._ring.record(owner) is None:
            raise BrokerError(
                f"no data key for {command.tenant_id}/{command.user_id} after asking for one"
            )
        return None

    def _load_keys(self, command: Command) -> None:
        """The subject's keys as ``keys`` holds them now (its partition read to the end)."""
        self._keys.ring_for(command.tenant_id, command.user_id)

    def _round_trip(self, command: Command, retries: int) -> CommandResult:
        results = self._topology.name(Topic.COMMAND_RESULTS)
        partition = partition_for(
            command.request_id, self._topology.partitions_for(Topic.COMMAND_RESULTS)
        )
        start = self._results.follow(results, partition)
        self._produce(command)
        wanted = command.request_id.encode("utf-8")
        for attempt in range(retries + 1):
            if attempt:
                self._results.follow(results, partition, start)
            deadline = time.monotonic() + self._timeout_s
            while time.monotonic() < deadline:
                for msg in self._results.poll(0.1):
                    if msg.key() == wanted:
                        return self._result(msg, command)
        raise BrokerError(
            f"no answer to request {command.request_id} within {self._timeout_s:g}s"
            f"{f' (waited {retries + 1} times)' if retries else ''}: "
            f"is `vigil command-processor` running for topics {self._topology.prefix}*?"
        )

    # -- internals -----------------------------------------------------------------------

    def _produce(self, command: Command) -> None:
        topic = self._topology.name(Topic.COMMANDS)
        key = command.subject_key
        partition = partition_for(key, self._topology.partitions_for(Topic.COMMANDS))
        try:
            value = encode_command(self._codec, self._ring, command)
        except ErasedError as exc:
            raise BrokerError(f"cannot send request {command.request_id}: {exc}") from exc
        self._producer.produce(topic, key, value, partition)
        self._producer.flush(FAILOVER_WAIT_S, "commands")

    def _result(self, msg: Message, command: Command) -> CommandResult:
        """The decoded result; a sealed one under a key not seen yet re-reads the keys once."""
        for attempt in (1, 2):
            try:
                return decode_result(self._codec, self._ring, msg.value() or b"")
            except ErasedError as exc:
                if attempt == 2:
                    raise BrokerError(f"unreadable command result: {exc}") from exc
                self._load_keys(command)
            except (SerdeError, ValueError) as exc:
                raise BrokerError(f"unreadable command result: {exc}") from exc
        raise AssertionError("unreachable")
