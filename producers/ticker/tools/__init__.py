"""Governed tools and pinned evaluators: what the poll ticker calls at a due instant.

Public: :class:`ToolRegistry`, :class:`ToolRequest` / :class:`ToolResult`, the :class:`Tool`
protocol, ``http.json@v1`` and the pinned evaluators ``workflow.run.status@v1`` and
``agent.session.state@v1``, :func:`build_registry` and :data:`REGISTERED` (what the evaluator
passes as ``evaluators``). Leaves out grants, budgets and scheduling (``producers.ticker.loop``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pipeline.config import ToolConfig
from producers.ticker.tools.base import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT,
    Tool,
    ToolMetrics,
    ToolRegistry,
    ToolRequest,
    ToolResult,
)
from producers.ticker.tools.http_json import HttpJsonTool
from producers.ticker.tools.pinned import (
    AGENT_SESSION,
    WORKFLOW_RUN,
    PinnedEvaluator,
    StateLookup,
    state_from_event,
)

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_TIMEOUT",
    "REGISTERED",
    "HttpJsonTool",
    "PinnedEvaluator",
    "StateLookup",
    "Tool",
    "ToolMetrics",
    "ToolRegistry",
    "ToolRequest",
    "ToolResult",
    "build_registry",
    "state_from_event",
]

REGISTERED: Final = frozenset({"http.json@v1", WORKFLOW_RUN.tool, AGENT_SESSION.tool})


def build_registry(
    instances: Mapping[str, ToolConfig],
    states: StateLookup,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    metrics: ToolMetrics | None = None,
) -> ToolRegistry:
    """Every shipped tool: ``http.json@v1`` over ``[tools.*]`` and both pinned evaluators."""
    return ToolRegistry(
        [
            HttpJsonTool(instances),
            PinnedEvaluator(WORKFLOW_RUN, states),
            PinnedEvaluator(AGENT_SESSION, states),
        ],
        concurrency=concurrency,
        metrics=metrics,
    )
