"""Every file in examples/ is valid as written, and together they cover what they promise: one
watcher per source kind and per delivery kind of vigil.example.toml, an agent proposal, a
schedule of each timing and each verb, a watcher alerting on change, and an event stream."""

from __future__ import annotations

import json
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.config import parse_config
from pipeline.ops.validate import check_definition_text, check_event_line

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEFINITIONS = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".json", ".yaml", ".yml"))
EVENTS = sorted(EXAMPLES.glob("*.jsonl"))
SUBJECT = {"tenant_id": "local", "user_id": "me"}


def test_examples_dir_holds_only_definitions_and_event_streams() -> None:
    assert {p.name for p in EXAMPLES.iterdir()} == {p.name for p in [*DEFINITIONS, *EVENTS]}


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_example_definition_validates(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert check_definition_text(text, path.name, **SUBJECT, proposal=None) == []


@pytest.mark.parametrize("path", EVENTS, ids=lambda p: p.name)
def test_example_events_validate(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    now = datetime(2026, 12, 1, 12, 5, tzinfo=UTC)
    for number, line in enumerate(lines, start=1):
        found, event = check_event_line(line, path.name, number, now=now)
        assert event is not None and found == [], found


def _body(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    body = yaml.safe_load(text) if path.suffix != ".json" else json.loads(text)
    assert isinstance(body, dict)
    return body


def test_examples_cover_every_source_timing_verb_and_delivery_kind() -> None:
    config = tomllib.loads((ROOT / "vigil.example.toml").read_text(encoding="utf-8"))
    parse_config(config)  # the targets below are a valid configuration's
    kinds = {name: d["kind"] for name, d in config["destinations"].items()}
    kinds |= {name: c["kind"] for name, c in config["chats"].items()}
    bodies = [_body(p) for p in DEFINITIONS]
    assert {b["source"]["kind"] for b in bodies} == {"event", "polling", "schedule"}
    schedules = [b for b in bodies if b["source"]["kind"] == "schedule"]
    assert {"at", "cron"} <= {t for b in schedules for t in ("at", "cron") if t in b["source"]}
    assert {b["delivery"].get("verb") for b in schedules} == {"send", "prompt", "run"}
    assert {kinds[b["delivery"]["target"]] for b in bodies if b["delivery"]["target"] in kinds} == {
        "webhook", "in_app", "log", "console", "telegram",
    }  # fmt: skip
    assert any("window" in b and "watcher_id" not in b for b in bodies), "an agent proposal"
    assert {"every", "change"} <= {b.get("mode", "every") for b in bodies}, "alerts on change"


def _doc_blocks() -> list[tuple[str, str]]:
    found = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for number, block in enumerate(re.findall(r"^```json\n(.*?)^```", text, re.S | re.M)):
            found.append((f"{page.name}#{number}", block))
    return found


@pytest.mark.parametrize(("where", "block"), _doc_blocks(), ids=[w for w, _ in _doc_blocks()])
def test_json_in_the_docs_is_a_valid_definition_or_event(where: str, block: str) -> None:
    body = json.loads(block)
    if "event_id" in body:
        now = datetime(2026, 11, 29, 12, 1, tzinfo=UTC)
        found, event = check_event_line(json.dumps(body), where, 1, now=now)
        assert event is not None and found == []
    else:
        assert check_definition_text(block, where, **SUBJECT, proposal=None) == []
