"""The console's words and sessions, pure: conditions as people read them, evidence leaves,
session expiry and CSRF comparison."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.control.http.console.render import (
    cadence_text,
    condition_text,
    environment,
    leaves,
    proposal_words,
)
from pipeline.control.http.console.sessions import SessionStore, same_token
from pipeline.rules.authz import Principal, Role

pytestmark = pytest.mark.unit

OWNER = Principal(name="owner", role=Role.USER, tenant_id="acme", user_id="u-1")


def test_a_condition_reads_as_words() -> None:
    condition = {
        "all": [
            {"eq": ["status", "failed"]},
            {"contains": ["branch", "release/"]},
            {"any": [{"exists": "commit.sha"}, {"not": {"ge": ["n", 3]}}]},
        ]
    }
    assert condition_text(condition) == (
        'status = "failed" and branch contains "release/" and (commit.sha exists or not (n ≥ 3))'
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@given(json_values)
def test_any_shape_renders_without_error(value: Any) -> None:
    assert isinstance(condition_text(value), str)
    assert isinstance(cadence_text(value), str)
    assert all(isinstance(path, str) for path, _ in leaves(value))
    if isinstance(value, dict):
        assert set(proposal_words(value)) >= {"source", "condition", "window", "cadence", "target"}


def test_evidence_leaves_are_dotted_paths_and_bounded() -> None:
    assert leaves({"status": "failed", "commit": {"sha": "abc", "n": 2}}) == [
        ("commit.n", "2"),
        ("commit.sha", "abc"),
        ("status", "failed"),
    ]
    assert len(leaves({f"k{n}": n for n in range(500)})) == 50


def test_templates_escape_what_tenants_wrote() -> None:
    html = environment().from_string("{{ v }}").render(v="<script>alert(1)</script>")
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_a_definition_without_a_condition_a_schedule_renders_as_a_dash() -> None:
    row = environment().from_string("{{ d.condition | condition }}").render(d={"source": {}})
    assert row == "—"
    assert proposal_words({"source": {"kind": "schedule", "cron": "0 9 * * *"}})["condition"] == "—"


def test_sessions_expire_are_evicted_oldest_first_and_tokens_compare_exactly() -> None:
    now = [0.0]
    store = SessionStore(ttl_s=10, per_principal=2, clock=lambda: now[0])
    first, second, third = (store.open(OWNER) for _ in range(3))
    assert store.get(first.sid) is None, "the principal's oldest, evicted past its bound"
    assert store.get(second.sid) == second and store.get(third.sid) == third
    assert first.csrf != second.csrf and len(second.csrf) >= 40
    now[0] = 10.0
    assert store.get(second.sid) is None, "expired"
    assert store.get(None) is None and store.get("x" * 500) is None
    assert same_token(third.csrf, third.csrf)
    assert not same_token("", "") and not same_token(None, third.csrf)
    assert not same_token(third.csrf[:-1], third.csrf)
