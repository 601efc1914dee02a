"""``[budgets]``: the caps a watcher gets when its definition leaves them out (``defaults``)
and the most one window may allow (``ceilings``), as the rules' own ``BudgetCaps`` and
``BudgetCeilings``. How budgets are charged is ``pipeline.rules.budgets``' and the store's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Final

from pydantic import (
    BeforeValidator,
    model_validator,
)

from pipeline.config.values import Section, rules_error
from pipeline.rules.budgets import NO_CEILINGS, BudgetCaps, BudgetCeilings
from pipeline.rules.errors import DefinitionError

__all__ = ["DEFAULT_CAPS", "BudgetsConfig"]

DEFAULT_CAPS: Final = BudgetCaps(
    window=timedelta(hours=1),
    evaluations=100_000,
    deliveries=100,
    attempts=1_000,
    tokens=100_000,
    micro_usd=100_000,
)
"""Caps a watcher gets when its definition leaves them out and ``[budgets.defaults]`` too."""


def _amounts(table: object) -> object:
    """A budget table as the rules' strict models read it: an amount a ``VIGIL_*`` variable
    set arrives as text, so digits are read as the number (anything else is refused there)."""
    if not isinstance(table, Mapping):
        return table
    return {
        key: int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
        for key, value in table.items()
    }


def _over_default_caps(table: object) -> object:
    """``[budgets.defaults]`` over :data:`DEFAULT_CAPS` (a key left out keeps its default),
    read by the rules' model, whose refusals name their key below this table."""
    if not isinstance(table, Mapping):
        return table
    defaults = {name: getattr(DEFAULT_CAPS, name) for name in BudgetCaps.model_fields}
    try:
        return BudgetCaps.model_validate({**defaults, **table})
    except DefinitionError as exc:
        raise rules_error(exc) from None


class BudgetsConfig(Section):
    """``[budgets.defaults]``: the caps a watcher gets when its definition leaves them out;
    ``[budgets.ceilings]``: the most any one window may allow, whatever a definition says
    (DESIGN.md §10; an absent key sets no ceiling). Both are the rules' own models."""

    defaults: Annotated[
        BudgetCaps, BeforeValidator(_over_default_caps), BeforeValidator(_amounts)
    ] = DEFAULT_CAPS
    ceilings: Annotated[BudgetCeilings, BeforeValidator(_amounts)] = NO_CEILINGS

    @model_validator(mode="after")
    def _defaults_within_ceilings(self) -> BudgetsConfig:
        try:
            self.ceilings.check(self.defaults, "defaults")
        except DefinitionError as exc:
            raise rules_error(exc) from None
        return self
