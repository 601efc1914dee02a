"""The control socket as a transport: permissions, one daemon per socket, framing errors.

A real Unix socket in a temp directory, served by the real :class:`SocketServer` with a small
handler that echoes what it was asked; the client is the real :func:`call`.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.control.socket.client import call
from pipeline.control.socket.server import Peer, SocketServer, default_socket_path
from pipeline.control.verbs import VerbResponse
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit


def _echo(body: object, peer: Peer) -> VerbResponse:
    return VerbResponse.success(body=body, pid=peer.pid, uid=peer.uid)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[SocketServer]:
    server = SocketServer(tmp_path / "run" / "vigil.sock", _echo, max_line=1024)
    server.start()
    try:
        yield server
    finally:
        server.close()


def _raw(path: Path, data: bytes, replies: int) -> list[dict[str, Any]]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(data)
        buffer = b""
        while buffer.count(b"\n") < replies:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buffer += chunk
    return [json.loads(line) for line in buffer.splitlines()]


def test_socket_is_created_mode_0600_in_a_private_directory(served: SocketServer) -> None:
    mode = os.stat(served.path).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(os.stat(served.path.parent).st_mode) == 0o700


def test_request_reaches_the_handler_with_the_peers_credentials(served: SocketServer) -> None:
    response = call(served.path, {"verb": "list"})
    assert response.ok and response.result is not None
    assert response.result["body"] == {"verb": "list"}
    assert response.result["pid"] == os.getpid()
    assert response.result["uid"] == os.getuid()


def test_second_server_on_a_live_socket_refuses_to_start(served: SocketServer) -> None:
    second = SocketServer(served.path, _echo)
    with pytest.raises(ConfigError, match="already serving"):
        second.start()
    assert call(served.path, {"verb": "list"}).ok  # the first one is untouched


def test_stale_socket_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "vigil.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    with SocketServer(path, _echo) as server:
        assert call(server.path, {"verb": "list"}).ok


def test_a_regular_file_at_the_socket_path_is_never_replaced(tmp_path: Path) -> None:
    path = tmp_path / "vigil.sock"
    path.write_text("precious")
    with pytest.raises(ConfigError, match="not a socket"):
        SocketServer(path, _echo).start()
    assert path.read_text() == "precious"


def test_malformed_json_non_object_and_oversized_lines_get_errors_and_serving_goes_on(
    served: SocketServer,
) -> None:
    big = b'{"verb": "send", "text": "' + b"x" * 5000 + b'"}'
    replies = _raw(
        served.path,
        b"{not json\n" + b"[1, 2]\n" + big + b"\n" + b'{"verb": "list"}\n',
        replies=4,
    )
    codes = [r.get("error", {}).get("code") for r in replies]
    assert codes == ["malformed", "malformed", "too_large", None]
    assert replies[3]["ok"] is True
    assert call(served.path, {"verb": "list"}).ok  # a new connection is served too


def test_close_removes_the_socket(tmp_path: Path) -> None:
    server = SocketServer(tmp_path / "vigil.sock", _echo)
    server.start()
    server.close()
    assert not server.path.exists()


def test_client_without_a_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="vigil daemon"):
        call(tmp_path / "absent.sock", {"verb": "list"})


def test_socket_path_order_is_flag_env_config_xdg_then_home(tmp_path: Path) -> None:
    flag, env, conf = tmp_path / "f.sock", tmp_path / "e.sock", tmp_path / "c.sock"
    environ = {"VIGIL_SOCKET": str(env), "XDG_RUNTIME_DIR": str(tmp_path / "x")}
    assert default_socket_path(flag, conf, environ) == flag
    assert default_socket_path(None, conf, environ) == env
    assert default_socket_path(None, conf, {"XDG_RUNTIME_DIR": "/x"}) == conf
    assert default_socket_path(None, None, {"XDG_RUNTIME_DIR": "/x"}) == Path("/x/vigil.sock")
    home = default_socket_path(None, None, {})
    assert home == Path("~/.config/vigil/vigil.sock").expanduser()


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a socket to another uid needs root")
def test_a_socket_handed_to_another_uid_is_theirs_0600_in_a_directory_that_stays_ours(
    tmp_path: Path,
) -> None:
    other = 65534  # nobody
    path = tmp_path / "agent" / "vigil.sock"
    with SocketServer(path, _echo, owner=other, peers={other}):
        found = os.stat(path)
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (other, 0o600)
        folder = os.stat(path.parent)
        assert (folder.st_uid, stat.S_IMODE(folder.st_mode)) == (os.geteuid(), 0o711)
        refused = call(path, {"verb": "list"})  # we are root, not the agent's uid
        assert refused.error is not None and refused.error.code.value == "unauthenticated"


def test_a_directory_someone_else_owns_or_others_may_write_is_never_used(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, -1)
    with pytest.raises(ConfigError, match="belongs to uid 65534"):
        SocketServer(theirs / "vigil.sock", _echo).start()
    open_dir = tmp_path / "shared"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(ConfigError, match="open to others"):
        SocketServer(open_dir / "vigil.sock", _echo, owner=65534).start()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "agent-dir-elsewhere", target_is_directory=True)
    (tmp_path / "agent-dir-elsewhere").mkdir(mode=0o700)
    with pytest.raises(ConfigError, match="not a directory this daemon can use"):
        SocketServer(link / "vigil.sock", _echo).start()


def test_a_listener_that_is_no_vigil_daemon_is_replaced_and_never_blocks_the_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run" / "vigil.sock"
    path.parent.mkdir(mode=0o700)
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squatter.bind(str(path))
    squatter.listen(1)
    try:
        with SocketServer(path, _echo) as server:
            answer = call(server.path, {"verb": "list"})
            assert answer.ok, answer  # ours, not the squatter's
    finally:
        squatter.close()


def test_a_private_directory_goes_with_its_server(tmp_path: Path) -> None:
    path = tmp_path / "private" / "vigil.sock"
    with SocketServer(path, _echo, remove_dir=True):
        assert path.exists()
    assert not path.parent.exists()
