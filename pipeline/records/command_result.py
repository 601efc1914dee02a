"""The ``command_result`` record (``schemas/command_result.v1.avsc``): the answer to one command,
keyed by its request id on ``command-results`` (the reply the API and CLI wait for)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pipeline.records.codec import Codec, decoded, json_text, parse_json
from pipeline.rules.commands.model import CommandResult
from pipeline.rules.instants import utc

__all__ = ["COMMAND_RESULT", "decode_result", "encode_result", "result_from_value", "result_value"]

COMMAND_RESULT: Final = "command_result"


def result_value(result: CommandResult) -> dict[str, Any]:
    return {
        "request_id": result.request_id,
        "verb": result.verb,
        "ok": result.ok,
        "error": None if result.error is None else result.error.model_dump(mode="json"),
        "result": None if result.result is None else json_text(result.result),
        "processed_at": utc(result.processed_at),
    }


def result_from_value(value: Mapping[str, Any]) -> CommandResult:
    body = dict(value)
    if body.get("result") is not None:
        body["result"] = parse_json(body["result"], "result")
    return CommandResult.model_validate(body)


def encode_result(codec: Codec, result: CommandResult) -> bytes:
    return codec.encode(COMMAND_RESULT, result_value(result))


def decode_result(codec: Codec, data: bytes) -> CommandResult:
    return result_from_value(decoded(codec, COMMAND_RESULT, data))
