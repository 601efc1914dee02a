"""A real local HTTP receiver for tests and benchmarks: webhooks and a Telegram-shaped chat API.

A threaded ``http.server`` on ``127.0.0.1:0`` (HTTP/1.1 keep-alive) that records every request
(method, path, lower-cased headers, body, signature verdict), verifies Standard Webhooks
signatures when given the secret, counts distinct ``Idempotency-Key`` values, and serves
``POST /bot<token>/sendMessage`` as the Bot API does (``{"ok": true, ...}``; a wrong token is
401). It can be scripted: the next N requests answer a status (500, 410, 429 with
``Retry-After``...) with a body that must never surface in a result, or stall before
answering (to provoke a client timeout); then it succeeds. :meth:`Receiver.fail_every` makes
every n-th request fail for as long as it runs (a steady failure rate). ``GET`` on a path given
to :meth:`Receiver.serve_json` answers that JSON (a governed tool's endpoint); GETs are counted,
not recorded. ``POST /bot<token>/getUpdates`` is the Bot API's long poll over the updates
:meth:`Receiver.message` and :meth:`Receiver.update` queue: an offset confirms (forgets) every
update below it, as Telegram does; polls are neither recorded nor scripted (:attr:`polls` keeps
the offsets asked for).

    with Receiver(secret="whsec_...") as receiver:
        receiver.fail(3, 500)
        ...post to receiver.hook_url...
        receiver.wait_for(4)

Left out: TLS, HTTP/2 and methods other than POST and GET.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final

from consumers.delivery.adapters.signing import Verification, signing_key, verify

__all__ = ["FAILURE_BODY", "ReceivedRequest", "Receiver"]

# Scripted failures answer this body; a test asserts it never appears in a result or a log.
FAILURE_BODY: Final = b"receiver-private-detail: do not keep me"
_CHAT_PATH = re.compile(r"^/bot(?P<token>[^/]+)/sendMessage$")
_UPDATES_PATH = re.compile(r"^/bot(?P<token>[^/]+)/getUpdates$")


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = field(repr=False)
    signature: Verification | None  # None: the receiver has no secret
    at: float  # time.monotonic() on arrival
    accepted: bool = True  # False: a chat call with the wrong bot token
    status: int = 200  # what the receiver answered

    @property
    def idempotency_key(self) -> str | None:
        return self.headers.get("idempotency-key")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class _Script:
    status: int
    retry_after: str | None
    stall: float


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (killed, timed out) is normal: stay quiet."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Receiver:
    """Start with ``with`` (or :meth:`start`); :meth:`close` releases stalled requests."""

    def __init__(self, *, secret: str | None = None, bot_token: str | None = None) -> None:
        self._key = None if secret is None else signing_key(secret)
        self._bot_token = bot_token
        self._lock = threading.Condition()
        self._requests: list[ReceivedRequest] = []
        self._script: deque[_Script] = deque()
        self._every: tuple[int, int] | None = None  # (n, status): every n-th request fails
        self._json: dict[str, bytes] = {}
        self.gets = 0
        self.polls: list[int] = []  # the offset of each getUpdates call
        self._updates: list[dict[str, Any]] = []
        self._next_update = 1
        self._released = threading.Event()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._released.set()
        with self._lock:
            self._lock.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- addresses -----------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def hook_url(self) -> str:
        return f"{self.url}/hook"

    # --- scripting -----------------------------------------------------------------------

    def fail(self, times: int, status: int, *, retry_after: str | None = None) -> None:
        """The next ``times`` requests answer ``status`` (with ``Retry-After`` if given)."""
        with self._lock:
            self._script.extend(_Script(status, retry_after, 0.0) for _ in range(times))

    def fail_every(self, n: int, status: int = 500) -> None:
        """From now on every ``n``-th request answers ``status`` (after any scripted ones)."""
        with self._lock:
            self._every = (n, status)

    def serve_json(self, path: str, value: Any) -> None:
        """``GET path`` answers ``value`` as JSON from now on."""
        with self._lock:
            self._json[path] = json.dumps(value).encode()

    def stall(self, seconds: float, times: int = 1) -> None:
        """The next ``times`` requests wait ``seconds`` (or until close) before a 200."""
        with self._lock:
            self._script.extend(_Script(200, None, seconds) for _ in range(times))

    def update(self, body: dict[str, Any]) -> int:
        """Queue one Bot API update (``update_id`` added); its id."""
        with self._lock:
            update_id = self._next_update
            self._next_update += 1
            self._updates.append({"update_id": update_id, **body})
            self._lock.notify_all()
            return update_id

    def message(self, chat_id: int, text: str, *, is_bot: bool = False) -> int:
        """Queue a text message a person (or a bot) wrote in ``chat_id``; its update id."""
        return self.update(
            {
                "message": {
                    "message_id": self._next_update * 10,
                    "from": {"id": 7, "is_bot": is_bot, "first_name": "tester"},
                    "chat": {"id": chat_id, "type": "private"},
                    "date": int(time.time()),
                    "text": text,
                }
            }
        )

    def _poll(self, offset: int, timeout: float, limit: int) -> list[dict[str, Any]]:
        deadline = time.monotonic() + min(timeout, 30.0)
        with self._lock:
            self.polls.append(offset)
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and not self._released.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            return self._updates[: max(1, limit)]

    # --- observations --------------------------------------------------------------------

    @property
    def requests(self) -> list[ReceivedRequest]:
        with self._lock:
            return list(self._requests)

    def distinct_keys(self) -> set[str]:
        """Distinct ``Idempotency-Key`` values received."""
        return {k for r in self.requests if (k := r.idempotency_key) is not None}

    def messages(self) -> list[dict[str, Any]]:
        """Bodies of accepted ``sendMessage`` calls (``chat_id``, ``text``)."""
        return [r.json() for r in self.requests if _CHAT_PATH.match(r.path) and r.accepted]

    def wait_for(self, count: int, timeout: float = 10.0) -> list[ReceivedRequest]:
        """Block until ``count`` requests have arrived (or fail after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(self._requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self._requests)} of {count} requests arrived")
                self._lock.wait(left)
            return list(self._requests)

    # --- serving -------------------------------------------------------------------------

    def _record(self, request: ReceivedRequest) -> _Script | None:
        with self._lock:
            script = None
            if self._script:
                script = self._script.popleft()
            elif self._every is not None and (len(self._requests) + 1) % self._every[0] == 0:
                script = _Script(self._every[1], None, 0.0)
            status = 200 if script is None or script.stall else script.status
            self._requests.append(replace(request, status=status if request.accepted else 401))
            self._lock.notify_all()
            return script

    def _served(self, path: str) -> bytes | None:
        with self._lock:
            self.gets += 1
            return self._json.get(path)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30  # an idle keep-alive connection's thread ends eventually
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: tests read records, not logs

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                updates = _UPDATES_PATH.match(self.path)
                if updates is not None:
                    self._get_updates(updates["token"], body)
                    return
                headers = {name.lower(): value for name, value in self.headers.items()}
                chat = _CHAT_PATH.match(self.path)
                accepted = chat is None or chat["token"] == receiver._bot_token
                verdict = None
                if receiver._key is not None and chat is None:
                    verdict = verify(receiver._key, headers, body, int(time.time()))
                script = receiver._record(
                    ReceivedRequest(
                        "POST", self.path, headers, body, verdict, time.monotonic(), accepted
                    )
                )
                if not accepted:
                    reply = {"ok": False, "error_code": 401, "description": "Unauthorized"}
                    self._answer(401, json.dumps(reply).encode(), None)
                elif script is not None and script.stall:
                    receiver._released.wait(script.stall)
                    self._answer(200, b"{}", None)
                elif script is not None:
                    self._answer(script.status, FAILURE_BODY, script.retry_after)
                elif chat is not None:
                    self._answer(200, b'{"ok":true,"result":{"message_id":1}}', None)
                else:
                    self._answer(200, b"{}", None)

            def _get_updates(self, token: str, body: bytes) -> None:
                if token != receiver._bot_token:
                    self._answer(401, b'{"ok":false,"error_code":401}', None)
                    return
                asked = json.loads(body or b"{}")
                found = receiver._poll(
                    int(asked.get("offset", 0)),
                    float(asked.get("timeout", 0)),
                    int(asked.get("limit", 100)),
                )
                self._answer(200, json.dumps({"ok": True, "result": found}).encode(), None)

            def do_GET(self) -> None:
                body = receiver._served(self.path)
                if body is None:
                    self._answer(404, b"{}", None)
                else:
                    self._answer(200, body, None)

            def _answer(self, status: int, body: bytes, retry_after: str | None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if retry_after is not None:
                        self.send_header("Retry-After", retry_after)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    self.close_connection = True  # the client gave up (a timeout test)

        return Handler
