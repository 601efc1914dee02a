from datetime import UTC, datetime

import pytest

from pipeline.ops.validate import parse_event_line
from pipeline.rules.errors import DefinitionError

pytestmark = pytest.mark.unit

DESIGN_EXAMPLE = (
    '{"source_id": "ci.pipeline", "event_type": "build.finished", "event_id": "b-981", '
    '"observed_at": "2026-11-29T12:00:00Z", "cursor": "981", "payload": {"status": "failed"}}'
)


def test_design_example_line_parses() -> None:
    line, observed_at = parse_event_line(DESIGN_EXAMPLE)
    assert line.source_id == "ci.pipeline"
    assert line.cursor == "981"
    assert line.payload == {"status": "failed"}
    assert observed_at == datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ('{"x": NaN}', "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (DESIGN_EXAMPLE.replace('"event_id": "b-981", ', ""), "event_id"),
        (DESIGN_EXAMPLE.replace('"981"', "981"), "cursor"),
        (DESIGN_EXAMPLE.replace('"cursor"', '"cursr"'), "unknown field"),
        (DESIGN_EXAMPLE.replace("12:00:00Z", "12:00:00"), "observed_at"),
    ],
)
def test_bad_line_raises_definition_error_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        parse_event_line(text)
