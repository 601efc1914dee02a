"""The ``command`` record (``schemas/command.v4.avsc``; v1 to v3 still read): one command as an
authenticated edge asserts it, keyed by subject on ``commands``.

Its subject content (the definition, a ``send``'s text) is sealed under the subject's data key
(associated data: request id and subject), so erasure makes ``commands`` unreadable at once;
without a key a command with content is not written (:class:`~pipeline.rules.errors.ErasedError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.records.sealing import WITHHELD, Sealer, identity, open_fields, seal_fields
from pipeline.rules.commands.model import Command
from pipeline.rules.data_keys import subject_owner
from pipeline.rules.errors import DefinitionError, ErasedError, SerdeError
from pipeline.rules.instants import utc

__all__ = ["COMMAND", "command_from_value", "command_value", "decode_command", "encode_command"]

COMMAND: Final = "command"
_SEALED: Final = ("definition", "text")


def _identity(request_id: str, tenant_id: str, user_id: str) -> bytes:
    return identity(COMMAND, request_id, tenant_id, user_id)


def command_value(command: Command, sealer: Sealer) -> dict[str, Any]:
    """The Avro ``command`` value, its content sealed (:class:`ErasedError` when the subject
    has no data key and there is content to seal)."""
    out = command.model_dump(mode="python", exclude={"definition", "grant", "principal"})
    out["verb"] = command.verb.value
    out["principal"] = command.principal.model_dump(mode="json")
    out["issued_at"] = utc(command.issued_at)
    out["reason"] = None if command.reason is None else command.reason.value
    out["state"] = None if command.state is None else command.state.value
    out["grant"] = (
        None if command.grant is None else json_text(command.grant.model_dump(mode="json"))
    )
    content = {
        "definition": None if command.definition is None else json_text(command.definition),
        "text": command.text,
    }
    out["definition"] = out["text"] = None
    if any(value is not None for value in content.values()):
        aad = _identity(command.request_id, command.tenant_id, command.user_id)
        sealed = seal_fields(
            sealer, subject_owner(command.tenant_id, command.user_id), aad, content
        )
        if sealed == WITHHELD:
            raise ErasedError(
                f"no data key for subject {command.tenant_id}/{command.user_id}: "
                "its content cannot be written"
            )
        out["sealed"] = sealed
    return out


def command_from_value(value: Mapping[str, Any], sealer: Sealer) -> Command:
    """A decoded ``command`` value; a bad one (or one whose sealed content no longer opens)
    raises :class:`DefinitionError` naming the field (refused like any invalid command, never
    a crash)."""
    body = dict(value)
    sealed = body.pop("sealed", None)
    if sealed is None and any(body.get(name) is not None for name in _SEALED):
        # Content travels sealed: plaintext is a downgrade that erasure could not reach.
        raise DefinitionError("unsealed content: a definition or text travels sealed", "sealed")
    if sealed is not None:
        aad = _identity(
            str(body.get("request_id")), str(body.get("tenant_id")), str(body.get("user_id"))
        )
        try:
            opened = open_fields(sealer, aad, sealed)
        except SerdeError:
            opened = None
        if opened is None:
            raise DefinitionError("erased: the subject's data key is gone", "definition")
        for name in _SEALED:
            body[name] = opened.get(name)
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


def encode_command(codec: Codec, sealer: Sealer, command: Command) -> bytes:
    return codec.encode(COMMAND, command_value(command, sealer))


def decode_command(codec: Codec, sealer: Sealer, data: bytes) -> Command:
    return command_from_value(decoded(codec, COMMAND, data), sealer)
