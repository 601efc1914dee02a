"""A receipt's associated data, made from its remembered per-version prefix, is the
length-prefixed identity of all its fields."""

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.records.receipt import RECEIPT, receipt_identity
from pipeline.records.sealing import identity
from pipeline.rules.errors import DefinitionError
from pipeline.rules.instants import to_epoch_micros

pytestmark = pytest.mark.unit

names = st.text(max_size=12)
instants = st.datetimes(timezones=st.just(UTC), min_value=datetime(1, 1, 2))


@given(names, names, names, st.integers(0, 2**40), names, instants)
def test_receipt_identity_is_the_identity_of_every_field(
    tenant: str, user: str, watcher: str, version: int, trigger_key: str, at: datetime
) -> None:
    expected = identity(
        RECEIPT, tenant, user, watcher, str(version), trigger_key, str(to_epoch_micros(at))
    )
    for _ in range(2):  # made, then from the remembered prefix
        assert receipt_identity(tenant, user, watcher, version, trigger_key, at) == expected


def test_a_field_that_is_not_valid_unicode_is_refused_every_time() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for _ in range(2):
        with pytest.raises(DefinitionError):
            receipt_identity("t", "\ud800", "w", 1, "k", now)
