"""Key-encryption keys: parsing (never echoing a key), rotation order, wrapping bound to its
record, and the one-line refusal when none is configured."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from pipeline.config import parse_config
from pipeline.crypto import KeyEncryptionKeys, generate_kek_text
from pipeline.rules.errors import ConfigError

pytestmark = pytest.mark.unit

KEY_A = base64.urlsafe_b64encode(b"a" * 32).decode()
KEY_B = base64.urlsafe_b64encode(b"b" * 32).decode().rstrip("=")


def test_entries_parse_in_rotation_order_and_the_last_is_the_newest() -> None:
    keks = KeyEncryptionKeys.parse(f"old:{KEY_A}, new:{KEY_B}")
    assert keks.ids == ("old", "new") and keks.newest == "new"
    kek_id, wrapped = keks.wrap(b"k" * 32, b"context")
    assert kek_id == "new"
    assert keks.unwrap("new", wrapped, b"context") == b"k" * 32


def test_a_wrapped_key_opens_only_for_its_own_record_and_kek() -> None:
    keks = KeyEncryptionKeys.parse(f"old:{KEY_A},new:{KEY_B}")
    _, wrapped = keks.wrap(b"k" * 32, b"owner-1")
    assert keks.unwrap("new", wrapped, b"owner-2") is None, "moved to another owner"
    assert keks.unwrap("old", wrapped, b"owner-1") is None, "another KEK"
    assert keks.unwrap("gone", wrapped, b"owner-1") is None, "a KEK this process lacks"
    assert keks.unwrap("new", wrapped[:-1] + bytes([wrapped[-1] ^ 1]), b"owner-1") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        ("no-colon", "entry 1 is not ID:KEY"),
        (f"a:{KEY_A},b:c2hvcnQ", "entry 2 (b) is not 32 bytes"),
        (f"bad id:{KEY_A}", "entry 1 is not ID:KEY"),
        (f"a:{KEY_A},a:{KEY_B}", "listed twice"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_entry_never_the_key(
    text: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        KeyEncryptionKeys.parse(text)
    message = str(caught.value)
    assert fragment in message
    assert KEY_A not in message and KEY_B not in message and "c2hvcnQ" not in message


def test_no_kek_configured_refuses_in_one_line_saying_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        KeyEncryptionKeys.load("VIGIL_TEST_NO_SUCH_VARIABLE", environ={})
    message = str(caught.value)
    assert "\n" not in message
    assert "no key-encryption key" in message and "vigil keys generate" in message


def test_the_variable_wins_over_the_file_and_the_file_serves_without_it(tmp_path: Path) -> None:
    keys = tmp_path / "master.keys"
    keys.write_text(f"from-file:{KEY_A}\n")
    config = parse_config({"privacy": {"master_key_env": "K", "master_key_file": str(keys)}})
    assert config.privacy.keks(environ={}).ids == ("from-file",)
    assert config.privacy.keks(environ={"K": f"from-env:{KEY_B}"}).ids == ("from-env",)


def test_repr_and_generated_entries_never_show_key_material() -> None:
    text = generate_kek_text("k1")
    kek_id, _, key = text.partition(":")
    keks = KeyEncryptionKeys.parse(text)
    assert kek_id == "k1" and len(base64.urlsafe_b64decode(key + "==")) == 32
    assert key not in repr(keks) and "k1" in repr(keks)
    assert generate_kek_text() != generate_kek_text(), "random every time"
    assert generate_kek_text().startswith("kek-")


def test_the_test_suite_runs_under_a_configured_kek() -> None:
    assert KeyEncryptionKeys.load().ids, os.environ.get("VIGIL_MASTER_KEYS", "")[:5]
