"""The ``run`` verb: start an operator-allowlisted script with vigil's context, fire and forget.

Owns :func:`resolve_script` (regular executables inside ``[run] allow_dir`` after resolving every
symlink; a bare name is looked up there) and :class:`ScriptRunner` (allowlisted environment and
``[run] env``, no capability, ``VIGIL_CHAT_ID``, ``VIGIL_SOCKET``, ``VIGIL_DELIVERY_KEY`` and a
fired schedule's ``VIGIL_SCHEDULE_NAME``/``VIGIL_SCHEDULE_TIME``; output and exit code logged). Left
out: who may run (``dispatch``) and retries (a started script counts as delivered)."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from pipeline.control.agent import ENV_CHAT_ID, ENV_SOCKET
from pipeline.control.isolation import allowlisted_env, clean_start
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import rfc3339_seconds

__all__ = [
    "ENV_DELIVERY_KEY",
    "ENV_SCHEDULE_NAME",
    "ENV_SCHEDULE_TIME",
    "RunStarted",
    "ScriptRunner",
    "resolve_script",
]

log = logging.getLogger(__name__)

ENV_DELIVERY_KEY: Final = "VIGIL_DELIVERY_KEY"
ENV_SCHEDULE_NAME: Final = "VIGIL_SCHEDULE_NAME"
ENV_SCHEDULE_TIME: Final = "VIGIL_SCHEDULE_TIME"
_MAX_LOGGED_LINE: Final = 500
_READ_LINE: Final = 64 * 1024


def resolve_script(script: str, allow_dir: Path, field: str = "args") -> Path:
    """The real path of ``script`` if it is an executable regular file inside ``allow_dir``
    (symlinks resolved on both sides); :class:`DefinitionError` otherwise, never a guess."""
    root = allow_dir.expanduser()
    try:
        real_root = root.resolve(strict=True)
    except OSError:
        raise DefinitionError(f"the run allowlist directory {root} does not exist", field) from None
    candidate = Path(script).expanduser()
    if not candidate.is_absolute():
        candidate = real_root / candidate
    try:
        real = candidate.resolve(strict=True)
    except OSError:
        raise DefinitionError(f"no script {script!r} in {root}", field) from None
    if not real.is_relative_to(real_root) or real == real_root:
        raise DefinitionError(f"{script!r} is outside the run allowlist {root}: refused", field)
    if not real.is_file() or not os.access(real, os.X_OK):
        raise DefinitionError(f"{script!r} is not an executable file", field)
    return real


@dataclass(frozen=True, slots=True)
class RunStarted:
    script: Path
    pid: int


class ScriptRunner:
    """Starts allowlisted scripts. Thread-safe; :meth:`wait_all` joins their watchers (tests)."""

    def __init__(
        self,
        allow_dir: Path,
        socket_path: Path,
        *,
        environ: Mapping[str, str] | None = None,
        pass_env: Sequence[str] = (),
    ) -> None:
        self._allow_dir = allow_dir
        self._socket_path = socket_path
        self._environ = allowlisted_env(os.environ if environ is None else environ, pass_env)
        self._watchers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def check(self, args: Sequence[str]) -> Path:
        """Refuse now what would be refused at fire time (a schedule is validated at creation)."""
        return resolve_script(args[0], self._allow_dir)

    def start(
        self,
        args: Sequence[str],
        *,
        chat: str,
        delivery_key: str,
        schedule_name: str | None = None,
        schedule_time: datetime | None = None,
    ) -> RunStarted:
        script = self.check(args)
        env = {
            **self._environ,
            ENV_CHAT_ID: chat,
            ENV_SOCKET: str(self._socket_path),
            ENV_DELIVERY_KEY: delivery_key,
        }
        if schedule_name is not None:
            env[ENV_SCHEDULE_NAME] = schedule_name
        if schedule_time is not None:
            env[ENV_SCHEDULE_TIME] = rfc3339_seconds(schedule_time)
        try:
            proc = subprocess.Popen(
                [str(script), *args[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(script.parent),
                start_new_session=True,
                preexec_fn=clean_start(),  # no capability, and no way to gain one
            )
        except OSError as exc:
            log.warning("run %s could not start: %s", script.name, exc.strerror)
            raise DefinitionError(f"cannot start {script.name}: {exc.strerror}", "args") from None
        watcher = threading.Thread(
            target=_watch, args=(proc, script.name), name=f"run-{proc.pid}", daemon=True
        )
        with self._lock:
            self._watchers = [t for t in self._watchers if t.is_alive()]
            self._watchers.append(watcher)
        watcher.start()
        return RunStarted(script, proc.pid)

    def wait_all(self, timeout: float) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            watcher.join(timeout)


def _watch(proc: subprocess.Popen[bytes], name: str) -> None:
    stdout = proc.stdout
    assert stdout is not None
    with stdout:  # read in bounded pieces: a line without end never grows the daemon
        for raw in iter(lambda: stdout.readline(_READ_LINE), b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            log.debug("run %s[%s]: %s", name, proc.pid, line[:_MAX_LOGGED_LINE])
    code = proc.wait()
    log.info("run %s[%s] exited %s", name, proc.pid, code)
    if code != 0:
        log.warning("run %s[%s] failed with exit code %s", name, proc.pid, code)
