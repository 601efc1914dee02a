"""Export from one namespace, import into another on the same broker (seed 000's snapshot):
``watch list`` and ``watch show`` agree field by field — active, paused, proposed, approved
agent and cancelled watchers, each with its version, revision and lifecycle times. A second
import is refused as ``create`` refuses (conflicts); a non-operator can neither export nor
import; a hostile file is refused before anything is sent."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pipeline.cli.group import vigil
from pipeline.control.agent import agent_principal
from pipeline.control.client import CommandClient, operator_principal
from pipeline.control.core import user_principal
from pipeline.kafka.admin import connect_admin, ensure_topics
from pipeline.kafka.topics import Topology
from pipeline.rules.authz import Action
from pipeline.rules.commands import CommandVerb, GrantSpec, ResultCode
from tests.integration.api_harness import ProcessorThread, agent_watch, event_watch
from tests.names import fresh

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TENANT, USER = f"x{uuid.uuid4().hex[:8]}", "u-move"


@dataclass
class Namespace:
    topology: Topology
    config: Path
    client: CommandClient

    def cli(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(vigil, ["--config", str(self.config), *args], input=stdin)

    def ok(self, verb: CommandVerb, who: Any = None, **fields: Any) -> dict[str, Any]:
        principal = who or operator_principal("ops", "root")
        result = self.client.send(self.client.command(verb, principal, TENANT, USER, **fields))
        assert result.ok and result.result is not None, result.error
        return result.result

    def grant(self) -> None:
        for purpose, sources, tools in (
            ("ops.alert", ("ci.pipeline",), ()),
            ("agent.watch", ("run:r-1", "run:r-2"), ("workflow.run.status@v1",)),
        ):
            spec = GrantSpec(
                tenant_id=TENANT,
                user_id=USER,
                purpose=purpose,
                sources=sources,
                tools=tools,
                targets=("ops-hook", "in-app"),
                actions=(Action.MANAGE, Action.PROPOSE, Action.APPROVE, Action.EVALUATE),
                until=datetime(2030, 1, 1, tzinfo=UTC),
            )
            self.ok(CommandVerb.GRANT_ADD, grant=spec)


@pytest.fixture(scope="module")
def spaces(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Namespace]]:
    found: list[Namespace] = []
    threads: list[ProcessorThread] = []
    try:
        for name in ("from", "into"):
            topology = Topology(fresh(f"t-{name}") + ".", 2)
            ensure_topics(connect_admin(kafka_bootstrap), topology)
            threads.append(ProcessorThread(kafka_bootstrap, topology))
            config = tmp_path_factory.mktemp(name) / "vigil.toml"
            config.write_text(
                f'[kafka]\nbootstrap_servers = "{kafka_bootstrap}"\n'
                f'topic_prefix = "{topology.prefix}"\npartitions = 2\n\n'
                f'[subject]\ntenant_id = "{TENANT}"\nuser_id = "{USER}"\n\n'
                '[operator]\nname = "op-move"\n',
                encoding="utf-8",
            )
            client = CommandClient(kafka_bootstrap, topology, timeout_s=60)
            found.append(Namespace(topology, config, client))
        yield found
    finally:
        for space in found:
            space.client.close()
        for thread in threads:
            thread.stop()


def _populate(space: Namespace) -> None:
    space.grant()
    space.ok(CommandVerb.CREATE, definition=event_watch("build-broke"))
    space.ok(CommandVerb.CREATE, definition=event_watch("quiet-one"))
    space.ok(CommandVerb.PAUSE, watcher_id="quiet-one", expected_revision=1)
    space.ok(CommandVerb.CREATE, definition=event_watch("gone"))
    space.ok(CommandVerb.CANCEL, watcher_id="gone", expected_revision=1)
    space.ok(CommandVerb.CREATE, definition=event_watch("gone", condition={"exists": "x"}))
    agent = agent_principal(TENANT, USER, "s-1")
    space.ok(CommandVerb.PROPOSE, agent, definition=agent_watch("waiting", run="r-1"))
    space.ok(CommandVerb.PROPOSE, agent, definition=agent_watch("approved", run="r-2"))
    space.ok(CommandVerb.APPROVE, watcher_id="approved")


def _shown(space: Namespace) -> dict[str, Any]:
    listed = space.cli("watch", "list", "--json")
    assert listed.exit_code == 0, listed.output
    views = json.loads(listed.stdout)
    shown = {}
    for watcher_id in sorted(v["watcher_id"] for v in views["watchers"]):
        show = space.cli("watch", "show", watcher_id, "--json")
        assert show.exit_code == 0, show.output
        shown[watcher_id] = json.loads(show.stdout)
    return {"list": views, "show": shown}


def test_an_export_imported_into_another_namespace_lists_and_shows_the_same(
    spaces: list[Namespace], tmp_path: Path
) -> None:
    source, target = spaces
    _populate(source)
    exported = source.cli("--as-operator", "export", "--subject", f"{TENANT}/{USER}")
    assert exported.exit_code == 0, exported.output
    document = json.loads(exported.stdout)
    ids = sorted(w["watcher_id"] for w in document["watchers"])
    assert ids == ["approved", "build-broke", "gone", "quiet-one", "waiting"]
    assert "receipt" not in exported.stdout
    path = tmp_path / "export.json"
    path.write_text(exported.stdout, encoding="utf-8")

    target.grant()
    imported = target.cli("--as-operator", "import", "-f", str(path), "--json")
    assert imported.exit_code == 0, imported.output
    assert all(r["imported"] for r in json.loads(imported.stdout)["results"])

    before, after = _shown(source), _shown(target)
    assert after["list"] == before["list"]
    assert after["show"] == before["show"]
    assert set(after["show"]) == {"approved", "build-broke", "gone", "quiet-one", "waiting"}
    assert (
        after["show"]["gone"]["version"] == 2 and after["show"]["quiet-one"]["status"] == "paused"
    )

    again = target.cli("--as-operator", "import", "-f", str(path), "--json")
    assert again.exit_code == 1
    codes = {r["watcher_id"]: r["error"]["code"] for r in json.loads(again.stdout)["results"]}
    assert set(codes.values()) == {"conflict"} and len(codes) == 5
    assert _shown(target) == after, "a refused import changes nothing"


def test_a_non_operator_can_neither_export_nor_import(
    spaces: list[Namespace], tmp_path: Path
) -> None:
    source, target = spaces
    refused = source.cli("export", "--subject", f"{TENANT}/{USER}")
    assert refused.exit_code == 2 and "operator" in refused.output
    owner = user_principal(TENANT, USER)
    asks: list[tuple[CommandVerb, dict[str, Any]]] = [
        (CommandVerb.EXPORT, {}),
        (CommandVerb.IMPORT, {"definition": {}}),
    ]
    for verb, fields in asks:
        command = target.client.command(verb, owner, TENANT, USER, **fields)
        result = target.client.send(command)
        assert result.error is not None and result.error.code is ResultCode.DENIED, verb
    path = tmp_path / "x.json"
    path.write_text("{}", encoding="utf-8")
    assert target.cli("import", "-f", str(path)).exit_code == 2


def test_a_hostile_file_is_refused_before_anything_is_sent(
    spaces: list[Namespace], tmp_path: Path
) -> None:
    _source, target = spaces
    path = tmp_path / "hostile.json"
    path.write_text("[" * 100_000, encoding="utf-8")
    refused = target.cli("--as-operator", "import", "-f", str(path))
    assert refused.exit_code == 1 and "Error:" in refused.output
    path.write_bytes(b"\xff\xfe garbage")
    assert target.cli("--as-operator", "import", "-f", str(path)).exit_code == 1
