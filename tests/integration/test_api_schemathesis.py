"""A property-based run against the served OpenAPI document (schemathesis), with the real broker
and command processor behind the API: no 5xx, and every response is a documented status code
with a documented body and content type; schema-violating requests are rejected.

Two bounded runs of schemathesis' CLI (its parallel workers keep the run short): the owner's
token over every operation but grants, and the operator's token over grants. Checks are named
explicitly: ``positive_data_acceptance`` is left out on purpose, because a body that fits the
schema (any JSON object as a ``source``) is still refused by the command processor's rules
with a documented 422.
"""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.api_harness import Plane, running_plane, token_of

pytestmark = pytest.mark.integration

ST = str(Path(sys.executable).with_name("st"))
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "negative_data_rejection",
    ]
)
EXAMPLES_PER_OPERATION = 30


@pytest.fixture(scope="module")
def plane(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    with running_plane(kafka_bootstrap, tmp_path_factory.mktemp("st")) as found:
        yield found


def schemathesis_run(plane: Plane, who: str, *selection: str) -> subprocess.Popen[str]:
    seed = random.randrange(2**31)
    command = [
        ST,
        "run",
        f"{plane.base_url}/openapi.json",
        "--workers",
        "4",
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--phases",
        "examples,fuzzing",
        "--checks",
        CHECKS,
        "--continue-on-failure",
        "--seed",
        str(seed),
        "--header",
        f"Authorization: Bearer {token_of(who)}",
        "--header",
        "Vigil-Protocol-Version: 1",
        *selection,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_no_operation_answers_5xx_or_an_undocumented_status(plane: Plane) -> None:
    runs = [
        schemathesis_run(plane, "owner", "--exclude-path-regex", "^/v1/(grants|ledger/wakes)"),
        schemathesis_run(plane, "operator", "--include-path-regex", "^/v1/grants"),
    ]
    for run in runs:  # concurrently: each mostly waits on command round trips
        try:
            out, err = run.communicate(timeout=240)
        finally:
            run.kill()
        tail = "\n".join(out.splitlines()[-60:])
        assert run.returncode == 0, tail + err[-2000:]
        assert " passed" in out and "unique failure" not in out, tail
