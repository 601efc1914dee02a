"""The pinned evaluators' registered states (seed 003): what each ``key@version`` can report.

Owns :data:`REGISTERED` (per evaluator, the state field and its values; a new value is a new
version) and :func:`check_registered_states`, which refuses a condition comparing that field with
anything else. Left out: reading the states (``producers.ticker.tools.pinned``) and which evaluators
an agent watch may name (``agent_watch``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from pipeline.rules.condition import AllOf, AnyOf, Compare, Condition, Contains, Exists, Not
from pipeline.rules.definition import WatcherDefinition
from pipeline.rules.errors import DefinitionError
from pipeline.rules.paths import format_path
from pipeline.rules.sources import PollingSource

__all__ = ["REGISTERED", "RegisteredStates", "check_registered_states"]


@dataclass(frozen=True, slots=True)
class RegisteredStates:
    """The field a pinned evaluator's payload reports its state in, and the values it takes."""

    field: str
    values: tuple[str, ...]

    def allowed(self) -> str:
        return ", ".join(self.values)


REGISTERED: Final[Mapping[str, RegisteredStates]] = {
    "workflow.run.status@v1": RegisteredStates(
        "status", ("queued", "running", "succeeded", "failed", "cancelled", "timed_out")
    ),
    "agent.session.state@v1": RegisteredStates(
        "state", ("idle", "running", "waiting_for_input", "completed", "failed", "cancelled")
    ),
}


def check_registered_states(definition: WatcherDefinition) -> None:
    """Refuse a comparison of a pinned evaluator's state field with an unregistered value (in
    ``condition`` and ``terminal_condition``); any other definition passes unchanged."""
    source = definition.source
    if not isinstance(source, PollingSource):
        return
    states = REGISTERED.get(source.tool)
    if states is None:
        return
    for name, tree in (
        ("condition", definition.parsed_condition),
        ("terminal_condition", definition.parsed_terminal),
    ):
        if tree is None:
            continue
        for leaf in _leaves(tree):
            if isinstance(leaf, Exists) or format_path(leaf.path) != states.field:
                continue
            value = leaf.needle if isinstance(leaf, Contains) else leaf.literal
            if not isinstance(value, str) or value not in states.values:
                raise DefinitionError(
                    f"{source.tool} reports {states.field} as one of {states.allowed()}, "
                    f"not {value!r:.60}",
                    name,
                )


def _leaves(tree: Condition) -> Iterator[Compare | Contains | Exists]:
    match tree:
        case AllOf(children=children) | AnyOf(children=children):
            for child in children:
                yield from _leaves(child)
        case Not(child=child):
            yield from _leaves(child)
        case Compare() | Contains() | Exists():
            yield tree
