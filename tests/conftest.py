"""Shared fixtures. Servers are found in this order (DESIGN.md §6): KAFKA_BOOTSTRAP_SERVERS /
REDIS_URL when set; else the project's own process-based broker and Redis from ``deploy/``.

Fixture contract used by every test module (keep these names):
- ``kafka_bootstrap`` (session): ``"host:port"`` of a real broker.
- ``redis_url`` (session): ``"redis://host:port/db"`` of a real Redis.
- ``unique_name`` (function): a factory ``unique_name("prefix") -> str`` unique per call.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable

import pytest

_counter = itertools.count()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    value = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not value:
        pytest.fail("KAFKA_BOOTSTRAP_SERVERS is not set (run the tests with `make test`)")
    return value


@pytest.fixture(scope="session")
def redis_url() -> str:
    value = os.environ.get("REDIS_URL")
    if not value:
        pytest.fail("REDIS_URL is not set (run the tests with `make test`)")
    return value


@pytest.fixture
def unique_name() -> Callable[[str], str]:
    run = uuid.uuid4().hex[:8]

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{run}-{next(_counter)}"

    return make
