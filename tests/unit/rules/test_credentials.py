"""Credential-looking values are refused wherever a reference is expected."""

from __future__ import annotations

import pytest

from pipeline.rules.credentials import credential_reason, reject_credential
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value",
    [
        "https://hooks.example.com/T000/B000/XXXX",
        "http://127.0.0.1:8080/hook",
        "hooks.slack.com/services/T0/B0/xyz",
        "ftp://files",
        "alice:hunter2@db.internal",
        "Bearer abc.def.ghi",
        "basic dXNlcjpwYXNz",
        "token=abc",
        "api_key: 123",
        "password=hunter2",
        "ghp_abcdefghijklmnop1234",
        "xoxb-1234-5678-abcdefgh",
        "sk-abcdefghijklmnopqrstu",
        "AKIAABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
        "123456789:AAHk2Zr8Lq9Xw3Vb7Nm5Tp1Yh6Gd4Sf0Jc",
        "q8Zr2Lk9Xw3Vb7Nm5Tp1Yh6Gd4Sf0Jc2",
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ],
)
def test_secret_shaped_value_is_flagged(value: str) -> None:
    assert credential_reason(value) is not None
    with pytest.raises(DefinitionError) as caught:
        reject_credential(value, "delivery.target")
    assert caught.value.field == "delivery.target"


@pytest.mark.parametrize(
    "value",
    [
        "ops-hook",
        "release-build-failed",
        "status-page",
        "run:r-81",
        "schedule:me:daily",
        "ci.pipeline",
        "http.json@v1",
        "agent.session.state@v1",
        "123e4567-e89b-12d3-a456-426614174000",
        "build_2026_11_29_release_candidate",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ],
)
def test_ordinary_reference_passes(value: str) -> None:
    assert credential_reason(value) is None
    assert reject_credential(value, "target") == value


def test_reason_names_what_it_looked_like() -> None:
    assert "URL" in (credential_reason("https://x.example") or "")
    assert "Authorization" in (credential_reason("Bearer x") or "")
