"""The value types ``vigil.toml``'s sections share (names, ids, URLs, listen addresses, zones)
and :class:`Section`, the frozen base every section model derives from.

A zone is the rules' (``pipeline.rules.zones.load_zone``), a duration the rules' ``Duration``;
a refusal of a rules model inside a section names its key through :func:`rules_error`.
"""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
)
from pydantic_core import PydanticCustomError

from pipeline.rules.errors import DefinitionError
from pipeline.rules.zones import load_zone

__all__ = [
    "RULES_ERROR",
    "EnvName",
    "Id",
    "Listen",
    "Name",
    "Section",
    "Url",
    "UserName",
    "Zone",
    "rules_error",
]


def _url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return value


def _listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("expected host:port (a port of 0 picks a free one)")
    return value


def _zone(value: str) -> str:
    """A zone a definition would accept too (the rules' loader: IANA names only)."""
    try:
        load_zone(value)
    except DefinitionError as exc:
        raise ValueError(exc.message) from None
    return value


Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Id = Annotated[str, Field(min_length=1, max_length=128)]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_.-]{0,31}$")]
Url = Annotated[str, AfterValidator(_url)]
Listen = Annotated[str, AfterValidator(_listen)]
Zone = Annotated[str, AfterValidator(_zone)]


RULES_ERROR: Final = "rules_error"


def rules_error(exc: DefinitionError) -> PydanticCustomError:
    """A refusal of a rules model inside a section: its field goes below the section's key."""
    return PydanticCustomError(
        RULES_ERROR, "{message}", {"message": exc.message, "field": exc.field}
    )


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
