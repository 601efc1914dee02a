"""The trust boundary through the socket and the CLI (issue 14's Must show): a real ``vigil
daemon`` and ``vigil command-processor`` on a real broker, and agents that are real processes.

Every escalation DESIGN.md §10 forbids an agent is tried by an agent run and refused: ``run``
now or scheduled, replacing or cancelling the user's schedule, ``query``/``prompt``, approving
its own proposal through ``vigil watch``, acting as an operator — also from a double-forked
child that dropped its token, after the run ended. With ``[agent] run_as`` the agent runs
under its own uid, sees none of vigil's secrets, and a child that calls ``setsid`` and
double-forks is still the agent, and it holds no capability. A revoked grant refuses pause,
cancel, erase and every daemon verb, changing nothing; an update with a stale or missing revision
is refused. Issue 27: an agent that reads every vigil process's environment finds no secret and
cannot become the operator; one that connects, forks and exits is refused on that connection; a
foreign listener on the agent socket path does not stop the daemon.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.integration.api_harness import agent_watch, event_watch
from tests.names import fresh

pytestmark = pytest.mark.integration

VIGIL: Final = [sys.executable, "-m", "pipeline.cli.main"]
AGENT_USER: Final = "vigil-test-agent"
SECRET: Final = "VIGIL_TEST_HOOK_SECRET"
WATCH: Final = event_watch("build-failed")
PROPOSAL: Final = agent_watch("aw-1", run="r-1", session="s-1")


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


class Stack:
    """A daemon and a command processor for one subject, in a directory of their own."""

    def __init__(self, root: Path, bootstrap: str, prefix: str, extra: str = "") -> None:
        self.root = root
        self.socket = root / "run" / "vigil.sock"
        self.config = root / "vigil.toml"
        self.prefix = prefix
        self.config.write_text(
            f'[kafka]\nbootstrap_servers = "{bootstrap}"\ntopic_prefix = "{prefix}."\n'
            "partitions = 2\nreplication_factor = 1\n\n"
            f'[subject]\ntenant_id = "tb"\nuser_id = "{prefix}"\ntimezone = "UTC"\n\n'
            '[operator]\nname = "ops"\n\n'
            '[chats.me]\nkind = "console"\n\n'
            f'[destinations.ops-hook]\nkind = "webhook"\nurl = "http://127.0.0.1:9/x"\n'
            f'secret_env = "{SECRET}"\n\n'
            f'[run]\nallow_dir = "{root}"\n\n'
            '[metrics]\nlisten = "127.0.0.1:0"\n\n'
            f'[instance]\nid = "{prefix}"\n\n{extra}'
        )
        self.env = {
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith("VIGIL_") or k == "VIGIL_MASTER_KEYS"  # the test KEK
            },
            "VIGIL_CONFIG": str(self.config),
            "VIGIL_SOCKET": str(self.socket),
            SECRET: "s3cret-never-for-agents",
            "PYTHONUNBUFFERED": "1",
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def vigil(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*VIGIL, *args], env=self.env, capture_output=True, text=True, input=stdin, timeout=90
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        done = self.vigil(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text() if path.exists() else ""

    def start(self, name: str) -> None:
        args = [*VIGIL, name] if name == "daemon" else [*VIGIL, name, "--no-metrics"]
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                args, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
            )

    def start_all(self) -> None:
        before = self.log("daemon").count("control grant")
        self.start("command-processor")
        self.start("daemon")
        _wait(lambda: self.log("daemon").count("control grant") > before, 90, "the daemon grant")

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

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def restart_daemon(self, config_text: str | None = None) -> None:
        self.stop("daemon")
        if config_text is not None:
            self.config.write_text(config_text)
        before = self.log("daemon").count("control grant")
        self.start("daemon")
        _wait(lambda: self.log("daemon").count("control grant") > before, 90, "the daemon")

    def use_agent(self, command: list[str], extra: str = "") -> None:
        """Run ``command`` as the agent (restarting the daemon on the new config): under our
        own uid (the explicit opt-in) unless ``extra`` names ``run_as``."""
        text = self.config.read_text().split("[agent]")[0]
        same = "" if "run_as" in extra else "allow_same_uid = true\n"
        self.restart_daemon(text + f"[agent]\ncommand = {json.dumps(command)}\n{same}{extra}")

    def schedules(self) -> dict[str, list[str]]:
        listed = json.loads(self.ok("list", "--json", "--chat", "me"))
        return {entry["name"]: entry["argv"] for entry in listed}

    def watcher(self, watcher_id: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.ok("watch", "show", watcher_id, "--json"))
        return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Iterator[Stack]:
    prefix = fresh("tb")
    found = Stack(tmp_path_factory.mktemp("trust"), kafka_bootstrap, prefix)
    assert found.vigil("topics", "create").returncode == 0
    try:
        found.start_all()
        me = ("--tenant", "tb", "--user", prefix)
        found.ok(
            "--as-operator", "grant", "add", *me, "--purpose", "agent.watch",
            "--source", "run:r-1", "--tool", "workflow.run.status@v1", "--target", "in-app",
            "--actions", "propose,approve,manage", "--until", "1d",
        )  # fmt: skip
        found.ok(
            "--as-operator", "grant", "add", *me, "--purpose", "ops.alert",
            "--source", "ci.pipeline", "--target", "ops-hook",
            "--actions", "evaluate,deliver,manage", "--until", "1d",
        )  # fmt: skip
        yield found
    finally:
        found.stop_all()


def _agent_script(stack: Stack, name: str, body: str) -> list[str]:
    """A shell agent whose lines run ``vigil`` (``$V``) and report ``label:exit-code``."""
    path = stack.root / f"{name}.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'V="{" ".join(VIGIL)}"\n'
        f'C="--config {stack.config}"\n'
        'try() { label=$1; shift; "$@" >/dev/null 2>&1; echo "$label:$?"; }\n' + body
    )
    path.chmod(0o755)
    return [str(path)]


def _results(text: str) -> dict[str, int]:
    return {
        label: int(code)
        for label, code in (line.rsplit(":", 1) for line in text.split() if ":" in line)
    }


# --- agents: every escalation refused, through the socket and the CLI ------------------------


def test_an_agent_run_gets_exactly_its_power_through_the_socket_and_the_cli(stack: Stack) -> None:
    stack.ok("schedule", "--chat", "me", "--in", "2h", "--name", "users", "--", "send", "mine")
    proposed = json.loads(
        stack.ok("watch", "propose", "-f", "-", "--json", stdin=json.dumps(PROPOSAL))
    )
    assert proposed["status"] == "proposed"
    (stack.root / "ok.sh").write_text("#!/bin/sh\necho ran > ran.txt\n")
    (stack.root / "ok.sh").chmod(0o755)
    command = _agent_script(
        stack,
        "escalating-agent",
        "try own $V schedule --in 1h --name own -- send hi\n"
        'try list-own sh -c "$V list --json | grep -q \'\\"own\\"\''
        ' && ! $V list --json | grep -q users"\n'
        "try schedule-run $V schedule --in 1h --name sr -- run ok.sh\n"
        "try update-users $V schedule --in 1h --name users --update -- send hijacked\n"
        "try cancel-users $V cancel --name users\n"
        "try run $V run ok.sh\n"
        "try query $V query hi\n"
        "try prompt $V prompt hi\n"
        "try approve $V $C watch approve aw-1\n"
        "try grant $V $C --as-operator grant list\n"
        "try cancel-own $V cancel --name own\n"
        "echo done\n",
    )
    stack.use_agent(command)
    answer = stack.ok("query", "--chat", "me", "go")
    assert _results(answer) == {
        "own": 0,
        "list-own": 0,
        "schedule-run": 1,
        "update-users": 1,
        "cancel-users": 1,
        "run": 1,
        "query": 1,
        "prompt": 1,
        "approve": 1,
        "grant": 2,  # a usage error: refused before anything is sent
        "cancel-own": 0,
    }, answer
    assert stack.schedules() == {"users": ["send", "mine"]}
    assert stack.watcher("aw-1")["status"] == "proposed"
    assert not (stack.root / "ran.txt").exists()


def test_a_double_forked_child_without_its_token_is_still_the_agent_after_the_run(
    stack: Stack,
) -> None:
    out = stack.root / "orphan.txt"
    command = _agent_script(
        stack,
        "forking-agent",
        # The child outlives the run, drops the token, and only then talks to the daemon.
        f"( ( unset VIGIL_AGENT_TOKEN; sleep 1; {{ try orphan-run $V schedule --in 1h -- run ok.sh;"
        f" try orphan $V schedule --in 1h --name orphan -- send left-behind; }} > {out}.tmp;"
        f" mv {out}.tmp {out} ) </dev/null >/dev/null 2>&1 & ) &\n"
        "echo started\n",
    )
    stack.use_agent(command)
    assert stack.ok("query", "--chat", "me", "go").strip() == "started"
    results = _wait(lambda: out.exists() and _results(out.read_text()), 60, "the orphan")
    assert results == {"orphan-run": 1, "orphan": 0}
    orphan = stack.watcher("schedule:me:orphan")
    assert orphan["session_id"] == "conversation:me"  # the conversation's agent, not the user
    stack.ok("cancel", "--chat", "me", "--name", "orphan")


CONNECT_FORK_EXIT: Final = """\
import json, os, socket, sys, time

out = sys.argv[1]
sock = socket.socket(socket.AF_UNIX)
sock.connect(os.environ["VIGIL_SOCKET"])  # the daemon reads this process's pid now
parent = os.getpid()
if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while os.path.exists(f"/proc/{parent}"):  # until the connecting process is gone
        time.sleep(0.05)
    sock.sendall(json.dumps({"verb": "run", "args": ["ok.sh"], "chat": "me"}).encode() + b"\\n")
    data = b""
    while not data.endswith(b"\\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    with open(out + ".tmp", "wb") as f:
        f.write(data)
    os.rename(out + ".tmp", out)
    os._exit(0)
print("started")
"""


def test_an_agent_that_connects_forks_and_exits_is_refused_run(stack: Stack) -> None:
    """DESIGN.md §10: socket identity is fail-closed. The connection outlives the process that
    opened it; its child asks on it once that process is gone: unauthenticated, never the user."""
    marker = stack.root / "forked-ran.txt"
    (stack.root / "ok.sh").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (stack.root / "ok.sh").chmod(0o755)
    agent = stack.root / "connect-fork-exit.py"
    agent.write_text(CONNECT_FORK_EXIT)
    out = stack.root / "connect-fork-exit.json"
    stack.use_agent([sys.executable, str(agent), str(out)])
    assert stack.ok("query", "--chat", "me", "go").strip() == "started"
    answer = _wait(lambda: out.exists() and json.loads(out.read_text()), 60, "the child")
    assert answer["ok"] is False and answer["error"]["code"] == "unauthenticated", answer
    assert not marker.exists()


SNOOPING_AGENT: Final = """\
import json, os, subprocess, sys

names, vigil, config = sys.argv[1].split(","), sys.argv[2].split(), sys.argv[3]
found, readable = {}, 0
parent = os.getppid()
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"pipeline.cli.main" not in f.read() and int(pid) != parent:
                continue
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\\0")
    except OSError:
        continue
    readable += 1
    seen = [e.split(b"=", 1)[0].decode() for e in entries if b"=" in e and e.split(b"=", 1)[1]]
    found[pid] = sorted(set(seen) & set(names))
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
env = {k: v for k, v in os.environ.items() if k != "VIGIL_AGENT_TOKEN"}
operator = subprocess.run([*vigil, "--config", config, "--as-operator", "grant", "list"],
                          env=env, capture_output=True, text=True)
print(json.dumps({
    "found": {pid: hit for pid, hit in found.items() if hit}, "readable": readable,
    "caps": {k: status[k].strip() for k in ("CapEff", "CapAmb", "CapPrm", "CapInh")},
    "operator": [operator.returncode, operator.stderr.strip()[-200:]],
    "own": sorted(set(os.environ) & set(names)),
}))
"""


def test_an_agent_finds_no_secret_in_any_vigil_process_and_cannot_become_operator(
    stack: Stack,
) -> None:
    """DESIGN.md §10 "Secrets are out of the agent's reach": vigil processes are non-dumpable
    and blank their secret variables once read, the agent starts with no capability, and
    without vigil's key-encryption keys (which it never gets) it cannot act as the operator."""
    names = [SECRET, "VIGIL_MASTER_KEYS", "VIGIL_CONFIG"]
    agent = stack.root / "snooping-agent.py"
    agent.write_text(SNOOPING_AGENT)
    stack.use_agent(
        [sys.executable, str(agent), ",".join(names), " ".join(VIGIL), str(stack.config)]
    )
    seen = json.loads(stack.ok("query", "--chat", "me", "go"))
    assert seen["found"] == {} and seen["own"] == [], seen
    assert set(seen["caps"].values()) == {"0000000000000000"}, seen
    code, message = seen["operator"]
    assert code == 1 and "VIGIL_MASTER_KEYS" in message, seen
    # What a privileged reader sees in the daemon's environment: the secrets' values blanked.
    shown = Path(f"/proc/{stack.procs['daemon'].pid}/environ").read_bytes()
    for name in (SECRET, "VIGIL_MASTER_KEYS"):
        assert stack.env[name].encode() not in shown, name


# --- the CLI acts as the subject; operators need an explicit identity --------------------------


def test_the_cli_is_the_user_by_default_and_operator_verbs_need_as_operator(stack: Stack) -> None:
    refused = stack.vigil("grant", "list")
    assert refused.returncode == 2 and "--as-operator" in refused.stderr
    other = stack.vigil("watch", "list", "--tenant", "tb", "--user", "someone-else")
    assert other.returncode == 2 and "operator" in other.stderr
    assert stack.vigil("--as-operator", "grant", "list", "--json").returncode == 0


# --- updates name their revision --------------------------------------------------------------


def test_an_update_with_a_stale_or_missing_revision_is_refused_and_changes_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    body = {**WATCH, "watcher_id": "cas-1"}
    stack.ok("watch", "create", "-f", "-", stdin=json.dumps(body))
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps({**body, "condition": {"eq": ["status", "broken"]}}))
    missing = stack.vigil("watch", "update", "-f", str(changed))
    assert missing.returncode == 2 and "--revision" in missing.stderr
    stale = stack.vigil("watch", "update", "-f", str(changed), "--revision", "7")
    assert stale.returncode == 1 and stale.stderr.strip().endswith("[stale_revision]")
    seen = stack.watcher("cas-1")
    assert (seen["version"], seen["revision"]) == (1, 1)
    assert seen["definition"]["condition"] == {"eq": ["status", "failed"]}
    stack.ok("watch", "update", "-f", str(changed), "--revision", "1")
    assert stack.watcher("cas-1")["definition"]["condition"] == {"eq": ["status", "broken"]}


# --- agents under their own uid ----------------------------------------------------------------


def _agent_user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("creating a user and running an agent under it needs root")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is missing (Debian: apt-get install passwd)")
    for _ in range(20):
        try:
            return pwd.getpwnam(AGENT_USER)
        except KeyError:
            done = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                 AGENT_USER],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode not in (0, 9):  # 9: created meanwhile by someone else
                time.sleep(0.5)  # /etc/passwd may be locked by a concurrent useradd
    return pwd.getpwnam(AGENT_USER)


RUN_AS_AGENT: Final = """\
import json, os, socket, sys, time

def ask(body):
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(os.environ["VIGIL_SOCKET"])
        s.sendall(json.dumps(body).encode() + b"\\n")
        data = b""
        while not data.endswith(b"\\n"):
            data += s.recv(65536)
    return json.loads(data)

out = sys.argv[1]
with open(out + ".env", "w") as f:
    f.write("\\n".join(sorted(os.environ)))
with open(out + ".caps", "w") as f:
    f.write("\\n".join(l for l in open("/proc/self/status").read().splitlines() if l[:3] == "Cap"))
if os.fork() == 0:
    os.setsid()  # leave the run's session and process group
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if os.fork() == 0:
        os.environ.pop("VIGIL_AGENT_TOKEN", None)
        time.sleep(1)
        answers = [
            ask({"verb": "schedule", "in": "1h", "name": "uid-run", "argv": ["run", "ok.sh"]}),
            ask({"verb": "schedule", "in": "1h", "name": "uid-orphan", "argv": ["send", "x"]}),
        ]
        with open(out + ".tmp", "w") as f:
            json.dump(answers, f)
        os.rename(out + ".tmp", out)
    os._exit(0)
print("started")
"""


def test_an_agent_under_run_as_has_no_secrets_no_capability_and_its_double_fork_is_the_agent(
    stack: Stack,
) -> None:
    user = _agent_user()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the agent to run under another uid")
    shared = Path(tempfile.mkdtemp(prefix="vigil-run-as-"))
    try:
        shared.chmod(0o755)
        box = shared / "box"
        box.mkdir()
        os.chown(box, user.pw_uid, user.pw_gid)
        agent = shared / "agent.py"
        agent.write_text(RUN_AS_AGENT)
        agent.chmod(0o644)
        out = box / "answers.json"
        stack.use_agent(
            [python, str(agent), str(out)],
            f'run_as = "{AGENT_USER}"\nsocket_path = "{shared / "sock" / "vigil.sock"}"\n',
        )
        assert "agents run as" in stack.log("daemon")
        assert stack.ok("query", "--chat", "me", "go").strip() == "started"
        answers = _wait(lambda: out.exists() and json.loads(out.read_text()), 60, "the child")
        run, orphan = answers
        assert run["ok"] is False and run["error"]["code"] == "denied", run
        assert orphan["ok"] is True, orphan
        seen = stack.watcher("schedule:me:uid-orphan")
        assert seen["session_id"] == f"agent-uid-{user.pw_uid}"
        caps = dict(line.split(":") for line in (box / "answers.json.caps").read_text().split("\n"))
        assert {
            k: caps[k].strip() for k in ("CapEff", "CapAmb", "CapPrm", "CapInh")
        } == dict.fromkeys(("CapEff", "CapAmb", "CapPrm", "CapInh"), "0000000000000000"), caps
        names = set((box / "answers.json.env").read_text().split())
        assert SECRET not in names and "VIGIL_CONFIG" not in names
        assert names >= {"PATH", "VIGIL_SOCKET", "VIGIL_AGENT_TOKEN", "VIGIL_CHAT_ID"}
        stack.ok("cancel", "--chat", "me", "--name", "uid-orphan")
    finally:
        stack.use_agent(["/bin/true"])
        shutil.rmtree(shared, ignore_errors=True)


LISTING_AGENT: Final = """\
import json, os, socket
with socket.socket(socket.AF_UNIX) as s:
    s.connect(os.environ["VIGIL_SOCKET"])
    s.sendall(json.dumps({"verb": "list", "chat": "me"}).encode() + b"\\n")
    data = b""
    while not data.endswith(b"\\n"):
        data += s.recv(65536)
print("listed" if json.loads(data)["ok"] else data.decode())
"""
SQUATTER: Final = """\
import os, socket, sys, time
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
print("listening", flush=True)
time.sleep(600)
"""


def test_a_foreign_listener_on_the_agent_socket_path_does_not_stop_the_daemon(
    stack: Stack,
) -> None:
    """Issue 27: a listener that is no vigil daemon on the configured agent socket path is
    replaced (one warning naming its pid); the old fixed default path squatted by the agent's
    uid is never used (a fresh private directory is); the agent reaches the daemon either way."""
    user = _agent_user()
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for the agent to run under another uid")
    shared = Path(tempfile.mkdtemp(prefix="vigil-squat-"))
    old_default = Path(tempfile.gettempdir()) / f"vigil-agent-{user.pw_uid}" / "vigil.sock"
    squatters: list[subprocess.Popen[str]] = []
    try:
        shared.chmod(0o755)
        agent = shared / "agent.py"
        agent.write_text(LISTING_AGENT)
        agent.chmod(0o644)
        path = shared / "sock" / "vigil.sock"
        for squat, uid in ((path, os.getuid()), (old_default, user.pw_uid)):
            squatters.append(
                subprocess.Popen(
                    [python, "-c", SQUATTER, str(squat)],
                    user=uid,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
            )
            assert squatters[-1].stdout is not None
            squatters[-1].stdout.readline()  # listening (or gone: the squat failed, fine)
        for extra in (f'socket_path = "{path}"\n', ""):
            stack.use_agent([python, str(agent)], f'run_as = "{AGENT_USER}"\n{extra}')
            assert stack.ok("query", "--chat", "me", "go").strip() == "listed"
        assert f"pid {squatters[0].pid} listens on it but is no vigil daemon" in stack.log("daemon")
    finally:
        for squatter in squatters:
            squatter.kill()
            squatter.communicate()
        stack.use_agent(["/bin/true"])
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(old_default.parent, ignore_errors=True)


def test_without_run_as_the_daemon_says_isolation_is_best_effort(stack: Stack) -> None:
    stack.use_agent(["/bin/true"])
    tail = stack.log("daemon").rsplit("control plane listening", 1)[-1]
    assert "agent isolation is by process ancestry only (best effort)" in tail


# --- a revoked grant locks management, erasure and the daemon's verbs --------------------------


def test_a_revoked_grant_refuses_pause_cancel_erase_and_every_daemon_verb(stack: Stack) -> None:
    me = ("--tenant", "tb", "--user", stack.prefix)
    stack.ok("watch", "create", "-f", "-", stdin=json.dumps({**WATCH, "watcher_id": "locked"}))
    stack.ok("schedule", "--chat", "me", "--in", "3h", "--name", "kept", "--", "send", "kept")
    (stack.root / "ok.sh").write_text("#!/bin/sh\necho ran > ran2.txt\n")
    (stack.root / "ok.sh").chmod(0o755)
    stack.use_agent(["/bin/echo", "an answer"])
    grants = json.loads(stack.ok("--as-operator", "grant", "list", "--json"))["grants"]
    for grant in grants:
        stack.ok("--as-operator", "grant", "revoke", "--id", grant["grant_id"])
    args: tuple[str, ...]
    try:
        for args in (
            ("watch", "pause", "locked"),
            ("watch", "cancel", "locked"),
            ("watch", "show", "locked"),
            ("--as-operator", "erase", *me, "--yes"),
        ):
            refused = stack.vigil(*args)
            assert refused.returncode == 1 and "[denied]" in refused.stderr, (args, refused)
        for args in (
            ("send", "--chat", "me", "x"),
            ("list", "--chat", "me"),
            ("schedule", "--chat", "me", "--in", "1h", "--", "send", "x"),
            ("cancel", "--chat", "me", "--name", "kept"),
            ("run", "--chat", "me", "ok.sh"),
            ("query", "--chat", "me", "x"),
            ("prompt", "--chat", "me", "x"),
        ):
            refused = stack.vigil(*args)
            assert refused.returncode == 1 and "no grant" in refused.stderr, (args, refused)
    finally:
        stack.restart_daemon()  # it ensures its grant again at start
    assert stack.schedules()["kept"] == ["send", "kept"]
    assert not (stack.root / "ran2.txt").exists()
    stack.ok(
        "--as-operator", "grant", "add", *me, "--purpose", "ops.alert",
        "--source", "ci.pipeline", "--target", "ops-hook",
        "--actions", "evaluate,deliver,manage", "--until", "1d",
    )  # fmt: skip
    kept = stack.watcher("locked")
    assert (kept["status"], kept["revision"]) == ("active", 1)
