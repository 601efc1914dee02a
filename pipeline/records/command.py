"""The ``command`` record (``schemas/command.v2.avsc``; v1 still read): one command as an
authenticated edge asserts it, keyed by subject on ``commands``. JSON bodies (a definition, a
grant) travel as RFC 8785 canonical text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.rules.commands.model import Command
from pipeline.rules.errors import DefinitionError, SerdeError
from pipeline.rules.instants import utc

__all__ = ["COMMAND", "command_from_value", "command_value", "decode_command", "encode_command"]

COMMAND: Final = "command"


def command_value(command: Command) -> dict[str, Any]:
    """The Avro ``command`` value."""
    out = command.model_dump(mode="python", exclude={"definition", "grant", "principal"})
    out["verb"] = command.verb.value
    out["principal"] = command.principal.model_dump(mode="json")
    out["issued_at"] = utc(command.issued_at)
    out["reason"] = None if command.reason is None else command.reason.value
    out["state"] = None if command.state is None else command.state.value
    out["definition"] = None if command.definition is None else json_text(command.definition)
    out["grant"] = (
        None if command.grant is None else json_text(command.grant.model_dump(mode="json"))
    )
    return out


def command_from_value(value: Mapping[str, Any]) -> Command:
    """A decoded ``command`` value; a bad one raises :class:`DefinitionError` naming the field
    (refused like any invalid command, never a crash)."""
    body = dict(value)
    for name in ("definition", "grant"):
        if body.get(name) is not None:
            try:
                body[name] = parse_json(body[name], name)
            except SerdeError:
                raise DefinitionError("not JSON", name) from None
    try:
        return Command.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or None
        raise DefinitionError(str(error["msg"]).removeprefix("Value error, "), where) from None


def encode_command(codec: Codec, command: Command) -> bytes:
    return codec.encode(COMMAND, command_value(command))


def decode_command(codec: Codec, data: bytes) -> Command:
    return command_from_value(decoded(codec, COMMAND, data))
