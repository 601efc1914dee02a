"""Names of what tests create on the shared broker, each marked with this test process's run.

Every topic prefix, topic and group a test makes on ``KAFKA_BOOTSTRAP_SERVERS`` comes from
:func:`fresh`: ``{what}-{RUN}-{n}``. At the end of the session ``tests/conftest.py`` deletes
the topics whose names carry this process's mark (:func:`ours`), so repeated runs against a
developer's long-lived broker do not pile up partitions until it runs out of file descriptors
(a full run creates about 5,000). Only this process's mark: another run, or another xdist
worker of this run, may still be using its own.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Final

__all__ = ["RUN", "fresh", "ours"]

RUN: Final = uuid.uuid4().hex[:8]
_counter = itertools.count()


def fresh(what: str = "t") -> str:
    """A name no other test, process or run uses: ``{what}-{RUN}-{n}``."""
    return f"{what}-{RUN}-{next(_counter)}"


def ours(topic: str) -> bool:
    """Whether ``topic`` was named by this test process (:func:`fresh`)."""
    return f"-{RUN}-" in topic
