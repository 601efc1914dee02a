"""The ``command_result`` record (``schemas/command_result.v2.avsc``; v1 still read): the answer
to one command, keyed by its request id on ``command-results`` (the reply the API and CLI wait
for). A result body (watcher views with their definitions, grant views) and an error (whose
message may quote what was sent) are sealed under the command's subject's data key, associated
data the request id; the waiting edge opens them by the key id they carry. A subject without a
key (an erasure's own answer, a refusal before any key) gets them plain."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.records.sealing import WITHHELD, Sealer, identity, open_fields, seal_fields
from pipeline.rules.commands.model import CommandResult
from pipeline.rules.data_keys import KeyOwner
from pipeline.rules.errors import ErasedError
from pipeline.rules.instants import utc

__all__ = ["COMMAND_RESULT", "decode_result", "encode_result", "result_from_value", "result_value"]

COMMAND_RESULT: Final = "command_result"


def _identity(request_id: str) -> bytes:
    return identity(COMMAND_RESULT, request_id)


def result_value(result: CommandResult, sealer: Sealer, owner: KeyOwner | None) -> dict[str, Any]:
    """The Avro value; the body sealed under ``owner``'s key when it has one."""
    value: dict[str, Any] = {
        "request_id": result.request_id,
        "verb": result.verb,
        "ok": result.ok,
        "error": None if result.error is None else result.error.model_dump(mode="json"),
        "result": None,
        "processed_at": utc(result.processed_at),
    }
    if result.result is None and result.error is None:
        return value
    sealed = WITHHELD
    if owner is not None:
        content = {"error": value["error"], "result": result.result}
        sealed = seal_fields(sealer, owner, _identity(result.request_id), content)
    if sealed == WITHHELD:
        value["result"] = None if result.result is None else json_text(result.result)
    else:
        value["error"] = None
        value["sealed"] = sealed
    return value


def result_from_value(value: Mapping[str, Any], sealer: Sealer) -> CommandResult:
    """The result (:class:`ErasedError` when its sealed body does not open here)."""
    body = dict(value)
    sealed = body.pop("sealed", None)
    if sealed is not None:
        opened = open_fields(sealer, _identity(str(body["request_id"])), sealed)
        if opened is None:
            raise ErasedError(f"the result of request {body['request_id']} does not open")
        body["result"] = opened.get("result")
        body["error"] = opened.get("error")
    elif body.get("result") is not None:
        body["result"] = parse_json(body["result"], "result")
    return CommandResult.model_validate(body)


def encode_result(
    codec: Codec, sealer: Sealer, result: CommandResult, owner: KeyOwner | None
) -> bytes:
    return codec.encode(COMMAND_RESULT, result_value(result, sealer, owner))


def decode_result(codec: Codec, sealer: Sealer, data: bytes) -> CommandResult:
    return result_from_value(decoded(codec, COMMAND_RESULT, data), sealer)
