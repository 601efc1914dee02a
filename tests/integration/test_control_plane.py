"""The control plane end to end (issue 8's "Must show"): the real ``vigil daemon`` and CLI
processes, the command processor, ticker, evaluator and delivery as subprocesses, a real broker
and Redis, and the real Telegram-shaped receiver as the chat endpoint.

Each stack gets its own topic prefix, subject, socket and consumer groups, so tests never see
another test's records.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from tests.receiver import Receiver

pytestmark = pytest.mark.integration

VIGIL: Final = [sys.executable, "-m", "pipeline.cli.main"]
BOT_TOKEN: Final = "123:control-plane-test"
CHAT_IDS: Final = {"me": 4242, "ops": 4343}
PIPELINE: Final = ("command-processor", "ticker", "evaluator", "delivery")
EVIL_TOKEN: Final = "another-tenants-token"
EVIL_DIGEST: Final = hashlib.sha256(EVIL_TOKEN.encode()).hexdigest()
AGENT: Final = """\
import pathlib, sys
text = sys.stdin.read().strip()
if text.startswith("flood "):  # flood MiB DONE-FILE: that much on stdout and on stderr
    _, mib, done = text.split()
    for _ in range(int(mib) * 16):
        sys.stdout.buffer.write(b"f" * 65536)
        sys.stderr.buffer.write(b"e" * 65536)
    pathlib.Path(done).touch()
    sys.exit(0)
print("agent says: " + text[::-1])
"""


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


class Stack:
    """One vigil deployment in a temp directory: config, socket, logs, processes."""

    def __init__(self, root: Path, prefix: str, receiver: Receiver, bootstrap: str, redis: str):
        self.root = root
        self.socket = root / "run" / "vigil.sock"
        self.prefix = prefix
        self.receiver = receiver
        self.scripts = root / "scripts"
        self.scripts.mkdir(parents=True, exist_ok=True)
        agent = root / "agent.py"
        agent.write_text(AGENT)
        chats = "".join(
            f'[chats.{name}]\nkind = "telegram"\napi_base = "{receiver.url}"\n'
            f'token_env = "VIGIL_TEST_BOT_TOKEN"\nchat_id = "{chat_id}"\n\n'
            for name, chat_id in CHAT_IDS.items()
        )
        self.config = root / "vigil.toml"
        self.config.write_text(
            f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopic_prefix = "{prefix}."\n'
            f"partitions = 2\nreplication_factor = 1\n\n"
            f'[redis]\nurl = "{redis}"\n\n'
            f'[subject]\ntenant_id = "cp"\nuser_id = "{prefix}"\ntimezone = "UTC"\n\n'
            f"{chats}"
            f'[agent]\ncommand = ["{sys.executable}", "{agent}"]\ntimeout = "20s"\n'
            "allow_same_uid = true\n\n"
            f'[run]\nallow_dir = "{self.scripts}"\n\n'
            f'[instance]\nid = "{prefix}"\n\n'
            '[operator]\nname = "ops"\n\n'
            '[api]\nlisten = "127.0.0.1:0"\n\n'
            f'[principals.evil]\ntoken_sha256 = "{EVIL_DIGEST}"\n'
            'role = "user"\ntenant_id = "evil"\nuser_id = "x"\n\n'
            '[metrics]\nlisten = "127.0.0.1:0"\n'
        )
        self.env = {
            **os.environ,
            "VIGIL_CONFIG": str(self.config),
            "VIGIL_SOCKET": str(self.socket),
            "VIGIL_TEST_BOT_TOKEN": BOT_TOKEN,
            "PYTHONUNBUFFERED": "1",
        }
        for name in ("VIGIL_CHAT_ID", "VIGIL_AGENT_TOKEN"):
            self.env.pop(name, None)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- processes -------------------------------------------------------------------------

    def vigil(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*VIGIL, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def start(self, name: str) -> subprocess.Popen[bytes]:
        if name in ("daemon", "api"):
            args = [*VIGIL, name]
        elif name == "delivery":
            args = [*VIGIL, name, "--no-metrics", "--group", f"{self.prefix}.delivery"]
        else:
            args = [*VIGIL, name, "--no-metrics"]
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        log.close()
        self.procs[name] = proc
        return proc

    def start_all(self) -> None:
        self.start("daemon")
        for name in PIPELINE:
            self.start(name)
        _wait(lambda: "control grant" in self.log("daemon"), 60, "the daemon's grant")

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def restart_daemon(self) -> None:
        """Start the daemon again (with the config as it is now) and wait for its grant."""
        grants = self.log("daemon").count("control grant")
        self.stop("daemon")
        self.start("daemon")
        _wait(lambda: self.log("daemon").count("control grant") > grants, 60, "the new daemon")

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    # -- observations ----------------------------------------------------------------------

    def texts(self, chat: str = "me") -> list[str]:
        return [m["text"] for m in self.receiver.messages() if m.get("chat_id") == CHAT_IDS[chat]]

    def wait_text(
        self, predicate: Callable[[str], bool], chat: str = "me", timeout: float = 60
    ) -> str:
        found = _wait(
            lambda: [t for t in self.texts(chat) if predicate(t)], timeout, f"a message in {chat}"
        )
        return str(found[0])

    def listed(self, chat: str = "me") -> list[dict[str, Any]]:
        result = self.vigil("list", "--json", "--chat", chat)
        assert result.returncode == 0, result.stderr
        entries: list[dict[str, Any]] = json.loads(result.stdout)
        return entries


def _make_stack(
    tmp: Path, unique_name: Callable[[str], str], bootstrap: str, redis: str, receiver: Receiver
) -> Stack:
    stack = Stack(tmp, unique_name("cp"), receiver, bootstrap, redis)
    created = stack.vigil("topics", "create")
    assert created.returncode == 0, created.stderr
    return stack


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
    names = iter(range(1_000_000))
    stack = _make_stack(
        tmp_path_factory.mktemp("control"),
        lambda p: f"{p}-{os.getpid()}-{int(time.time())}-{next(names)}",
        kafka_bootstrap,
        redis_url,
        receiver,
    )
    stack.start_all()
    try:
        # Warm up: delivery is assigned (an immediate send arrives) and a schedule fires.
        assert stack.vigil("send", "--chat", "ops", "warm-up").returncode == 0
        stack.wait_text(lambda t: t == "warm-up", chat="ops", timeout=90)
        warm = stack.vigil("schedule", "--chat", "ops", "--in", "1s", "--", "send", "warm-tick")
        assert warm.returncode == 0, warm.stderr
        stack.wait_text(lambda t: t.startswith("warm-tick"), chat="ops", timeout=90)
        yield stack
    finally:
        stack.stop_all()


# --- must show --------------------------------------------------------------------------------


def test_schedule_in_2s_send_arrives_once_and_leaves_the_list(stack: Stack) -> None:
    created = stack.vigil(
        "schedule", "--chat", "me", "--in", "2s", "--name", "hi", "--", "send", "hi"
    )
    assert created.returncode == 0, created.stderr
    assert "hi" in created.stdout
    assert [e["name"] for e in stack.listed("me")] == ["hi"]  # before it fires
    stack.wait_text(lambda t: t == "hi", timeout=30)
    _wait(lambda: stack.listed("me") == [], 30, "the fired one-shot to leave the list")
    time.sleep(2)  # a duplicate would arrive in this window
    assert stack.texts("me").count("hi") == 1


def test_name_collision_fails_update_replaces_two_chats_coexist_cancel_unknown_exits_1(
    stack: Stack,
) -> None:
    first = stack.vigil(
        "schedule", "--chat", "me", "--in", "1h", "--name", "dup", "--", "send", "one"
    )
    assert first.returncode == 0, first.stderr
    clash = stack.vigil(
        "schedule", "--chat", "me", "--in", "1h", "--name", "dup", "--", "send", "two"
    )
    assert clash.returncode != 0
    assert "already exists" in clash.stderr and "--update" in clash.stderr
    updated = stack.vigil(
        "schedule", "--chat", "me", "--in", "2h", "--name", "dup", "--update", "--", "send", "two"
    )
    assert updated.returncode == 0, updated.stderr
    [entry] = [e for e in stack.listed("me") if e["name"] == "dup"]
    assert entry["argv"] == ["send", "two"]
    other = stack.vigil(
        "schedule", "--chat", "ops", "--in", "1h", "--name", "dup", "--", "send", "x"
    )
    assert other.returncode == 0, other.stderr
    assert [e["argv"] for e in stack.listed("ops") if e["name"] == "dup"] == [["send", "x"]]
    unknown = stack.vigil("cancel", "--chat", "me", "--name", "never-made")
    assert unknown.returncode == 1
    assert "no schedule named 'never-made'" in unknown.stderr
    for chat in ("me", "ops"):
        assert stack.vigil("cancel", "--chat", chat, "--name", "dup").returncode == 0
    assert all(e["name"] != "dup" for e in stack.listed("me") + stack.listed("ops"))


def test_query_prints_the_agents_answer_and_delivers_nothing(stack: Stack) -> None:
    before = len(stack.receiver.messages())
    result = stack.vigil("query", "--chat", "me", "status please")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "agent says: " + "status please"[::-1]
    # Delivery is live: a send after the query arrives, and it is the only new message.
    assert stack.vigil("send", "--chat", "me", "after-query").returncode == 0
    stack.wait_text(lambda t: t == "after-query")
    new = [m["text"] for m in stack.receiver.messages()[before:]]
    assert new == ["after-query"]


def test_prompt_delivers_the_agents_answer_to_the_chat(stack: Stack) -> None:
    result = stack.vigil("prompt", "--chat", "ops", "morning digest")
    assert result.returncode == 0, result.stderr
    expected = "agent says: " + "morning digest"[::-1]
    stack.wait_text(lambda t: t == expected, chat="ops")
    time.sleep(2)  # a duplicate would arrive in this window
    assert stack.texts("ops").count(expected) == 1


def test_socket_is_0600_and_a_second_daemon_refuses_to_start(stack: Stack) -> None:
    assert stat.S_IMODE(os.stat(stack.socket).st_mode) == 0o600
    second = stack.vigil("daemon", timeout=30)
    assert second.returncode != 0
    assert "already serving" in second.stderr
    assert stack.vigil("list", "--chat", "me").returncode == 0  # the first still serves


def test_malformed_unknown_and_oversized_lines_get_errors_and_the_daemon_keeps_serving(
    stack: Stack,
) -> None:
    lines = [
        b"{this is not json",
        b'{"verb": "reboot"}',
        b'{"verb": "send", "chat": "me", "text": "' + b"x" * 70_000 + b'"}',
        b'{"verb": "list", "chat": "me"}',
    ]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(stack.socket))
        sock.sendall(b"\n".join(lines) + b"\n")
        data = b""
        while data.count(b"\n") < len(lines):
            chunk = sock.recv(65536)
            assert chunk, "the daemon closed the connection"
            data += chunk
    replies = [json.loads(line) for line in data.splitlines()]
    assert [r.get("error", {}).get("code") for r in replies[:3]] == [
        "malformed",
        "unknown_verb",
        "too_large",
    ]
    assert replies[3]["ok"] is True
    assert stack.vigil("list", "--chat", "me").returncode == 0


def test_help_teaches_each_verb_with_an_example(stack: Stack) -> None:
    top = stack.vigil("--help")
    assert top.returncode == 0
    for verb in ("send", "prompt", "query", "run", "schedule", "list", "cancel"):
        assert f"vigil {verb}" in top.stdout
        help_text = stack.vigil(verb, "--help").stdout
        assert "Example" in help_text and f"vigil {verb}" in help_text


def test_run_starts_an_allowlisted_script_with_chat_and_socket(stack: Stack) -> None:
    out = stack.root / "run-env.txt"
    script = stack.scripts / "env.sh"
    script.write_text(f'#!/bin/sh\necho "$VIGIL_CHAT_ID|$VIGIL_SOCKET|$1" > {out}\n')
    script.chmod(0o700)
    result = stack.vigil("run", "--chat", "ops", "env.sh", "arg")
    assert result.returncode == 0, result.stderr
    text = _wait(lambda: out.exists() and out.read_text().strip(), 20, "the script's output")
    assert text == f"ops|{stack.socket}|arg"
    outside = stack.vigil("run", "--chat", "ops", "/bin/true")
    assert outside.returncode == 1 and "outside the run allowlist" in outside.stderr


def test_agent_run_schedules_and_cancels_its_own_with_its_token(stack: Stack) -> None:
    agent = stack.root / "scheduling-agent.sh"
    agent.write_text(
        "#!/bin/sh\n"
        f'{" ".join(VIGIL)} schedule --in 1h --name by-agent -- send "from the agent" >/dev/null'
        " && echo scheduled\n"
        f"{' '.join(VIGIL)} list --json | grep -c by-agent\n"
        f"{' '.join(VIGIL)} cancel --name by-agent >/dev/null && echo cancelled-own\n"
    )
    agent.chmod(0o700)
    config = stack.config.read_text()
    stack.config.write_text(
        config.replace(
            f'command = ["{sys.executable}", "{stack.root / "agent.py"}"]', f'command = ["{agent}"]'
        )
    )
    try:
        stack.restart_daemon()
        result = stack.vigil("query", "--chat", "me", "remind me")
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["scheduled", "1", "cancelled-own"]
        assert [e["name"] for e in stack.listed("me") if e["name"] == "by-agent"] == []
    finally:
        stack.config.write_text(config)
        stack.vigil("cancel", "--chat", "me", "--name", "by-agent")
        stack.restart_daemon()  # with the stack's own agent again, for the tests after this one


def test_one_shot_due_while_everything_was_down_fires_once_flagged_late(
    tmp_path: Path,
    unique_name: Callable[[str], str],
    kafka_bootstrap: str,
    redis_url: str,
) -> None:
    with Receiver(bot_token=BOT_TOKEN) as receiver:
        stack = _make_stack(tmp_path, unique_name, kafka_bootstrap, redis_url, receiver)
        try:
            stack.start_all()
            created = stack.vigil(
                "schedule", "--chat", "me", "--in", "40s", "--name", "late", "--", "send", "wake up"
            )
            assert created.returncode == 0, created.stderr
            due = created.stdout.strip().rsplit(" ", 1)[-1]
            stack.stop_all()
            # 40 s of lead: on a loaded CI machine creating and stopping took over 15 s once,
            # and the schedule fired before the stack was down.
            due_at = datetime.strptime(due, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            assert datetime.now(UTC) < due_at, "the stack took longer to stop than the lead"
            # Let the instant pass, and the ticker's grace with it, while nothing runs.
            _wait(lambda: datetime.now(UTC) > due_at + timedelta(seconds=8), 60, "the due time")
            assert receiver.messages() == []
            stack.start_all()
            text = stack.wait_text(lambda t: t.startswith("wake up"), timeout=90)
            assert "late" in text and due in text
            time.sleep(2)  # a duplicate would arrive in this window
            assert len(stack.texts("me")) == 1
        finally:
            stack.stop_all()


# --- the host's powers stay with the host (DESIGN.md §10) --------------------------------------


def test_a_scheduled_run_is_spawned_by_the_daemon(stack: Stack) -> None:
    """Delivery asks the daemon over its socket; the script is the daemon's child."""
    out = stack.root / "fired-parent.txt"
    script = stack.scripts / "parent.sh"
    script.write_text(
        f"#!/bin/sh\ntr '\\0' ' ' < /proc/$PPID/cmdline > {out}.tmp\n"
        f'echo "|$VIGIL_SCHEDULE_NAME|$VIGIL_DELIVERY_KEY" >> {out}.tmp\nmv {out}.tmp {out}\n'
    )
    script.chmod(0o700)
    created = stack.vigil(
        "schedule", "--chat", "me", "--in", "1s", "--name", "fired-run", "--", "run", "parent.sh"
    )
    assert created.returncode == 0, created.stderr
    text = _wait(lambda: out.exists() and out.read_text().strip(), 60, "the fired script")
    parent, name, key = text.split("|")
    assert "daemon" in parent.split() and "delivery" not in parent.split(), parent
    assert name == "fired-run" and re.fullmatch(r"[0-9a-f]{64}", key), text


def test_another_tenants_run_and_prompt_schedules_are_refused_at_create_and_never_run(
    stack: Stack,
) -> None:
    """Another tenant, granted the daemon's chat and purpose as its own, asks through the HTTP
    API and through the operator's CLI (Kafka) for a run or prompt of the daemon's host: refused
    at create; nothing fires, no script and no agent runs."""
    marker = stack.root / "evil-ran.txt"
    script = stack.scripts / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o700)
    granted = stack.vigil(
        "--as-operator", "grant", "add", "--tenant", "evil", "--user", "x",
        "--purpose", "control.chat", "--source", "schedule:me", "--target", "me",
        "--actions", "evaluate,deliver,manage", "--until", "1d",
    )  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    if "api" not in stack.procs:
        stack.start("api")
    found = _wait(lambda: re.search(r"listening on (http://\S+)", stack.log("api")), 60, "the api")
    api = found.group(1)
    at = (datetime.now(UTC) + timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    headers = {"Authorization": f"Bearer {EVIL_TOKEN}", "Vigil-Protocol-Version": "1"}
    for verb, action in (("run", {"args": ["evil.sh"]}), ("prompt", {"text": f"touch {marker}"})):
        body = {
            "watcher_id": f"schedule:me:evil-{verb}",
            "purpose": "control.chat",
            "source": {"kind": "schedule", "at": at},
            "delivery": {"target": "me", "verb": verb, **action},
        }
        answer = httpx.post(f"{api}/v1/watches", json=body, headers=headers, timeout=60)
        assert answer.status_code == 403, answer.text
        assert "daemon" in answer.json()["error"]["message"]
        path = stack.root / f"evil-{verb}.json"
        path.write_text(json.dumps(body))
        forged = stack.vigil(
            "--as-operator", "watch", "create", "-f", str(path), "--tenant", "evil", "--user", "x"
        )
        assert forged.returncode == 1 and "[denied]" in forged.stderr, forged.stderr
    due = datetime.strptime(at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    _wait(lambda: datetime.now(UTC) > due + timedelta(seconds=5), 30, "the would-be due time")
    assert not marker.exists()


# --- the daemon's own bounds (issue 27 item 8) ------------------------------------------------


def _peak_rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert found, status
    return int(found.group(1))


def test_an_agent_that_prints_50_mib_leaves_the_daemon_bounded_and_its_answer_truncated(
    stack: Stack,
) -> None:
    daemon = stack.procs["daemon"].pid
    before = _peak_rss_kib(daemon)
    done = stack.root / "flood-done"
    result = stack.vigil("query", "--chat", "me", f"flood 50 {done}", timeout=120)
    assert result.returncode == 0, result.stderr
    answer = result.stdout.strip()
    assert answer.startswith("ffff")
    assert answer.endswith("[agent output truncated at 1048576 bytes]"), answer[-80:]
    assert done.exists()  # it ran to its end: not killed for talking
    # 100 MiB went through the daemon's pipes; it kept 1 MiB of each (the peak grows by far
    # less than one stream would have taken).
    assert _peak_rss_kib(daemon) - before < 20 * 1024
    assert "past the output cap" in stack.log("daemon")


def test_200_idle_connections_yield_to_a_client_and_are_refused_cleanly(stack: Stack) -> None:
    with contextlib.ExitStack() as held:
        idle = [held.enter_context(_connected(stack.socket)) for _ in range(200)]
        served = stack.vigil("list", "--chat", "me")
        assert served.returncode == 0, served.stderr  # a client that asks is served
        # With 64 slots, the oldest idle ones made room: each was told why, then closed.
        refused = [_closing_line(sock) for sock in idle[:136]]
        assert {r["error"]["code"] for r in refused} == {"busy"}, refused[:3]
        assert all(r["ok"] is False for r in refused)
    listeners = re.findall(r"metrics and health on (http://\S+)", stack.log("daemon"))
    assert listeners, stack.log("daemon")[-2000:]
    text = httpx.get(f"{listeners[-1]}/metrics", timeout=10).text  # the running daemon's
    evicted = re.search(r'vigil_daemon_socket_closed_total\{reason="evicted"\} (\S+)', text)
    assert evicted and float(evicted.group(1)) >= 136, text[-2000:]
    assert stack.vigil("list", "--chat", "me").returncode == 0


def _connected(path: Path) -> socket.socket:
    """A connection, waiting while the daemon's listen backlog is full (EAGAIN)."""
    deadline = time.monotonic() + 30
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(20)
        try:
            sock.connect(str(path))
            return sock
        except BlockingIOError:
            sock.close()
            assert time.monotonic() < deadline, "the daemon never accepted"
            time.sleep(0.05)


def _closing_line(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(4096)
        assert chunk, "closed without a line"
        data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer
