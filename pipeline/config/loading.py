"""Reading ``vigil.toml``: :func:`load_config` finds the file (``--config`` → ``$VIGIL_CONFIG`` →
``./vigil.toml`` → built-in defaults), parses it with ``tomllib``, lays the environment's
``VIGIL_<SECTION>__<KEY>`` variables over it and validates the result; any error becomes one
:class:`ConfigError` whose lines name the dotted key. What the keys mean is the models'.
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import EnvSettingsSource
from pydantic_settings.exceptions import SettingsError

from pipeline.config.model import CONFIG_ENV, VigilConfig
from pipeline.config.values import RULES_ERROR
from pipeline.rules.errors import ConfigError

__all__ = [
    "DEFAULT_FILE",
    "ENV_PREFIX",
    "config_file",
    "env_overrides",
    "load_config",
    "parse_config",
]

ENV_PREFIX: Final = "VIGIL_"
DEFAULT_FILE: Final = "vigil.toml"


def config_file(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Path | None:
    """The file :func:`load_config` reads: ``path``, else ``$VIGIL_CONFIG``, else
    ``./vigil.toml`` when it exists, else none (built-in defaults)."""
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    if path is None:
        local = (cwd or Path.cwd()) / DEFAULT_FILE
        return local if local.is_file() else None
    return path.expanduser()


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The keys ``VIGIL_<SECTION>__<KEY>`` variables set (``VIGIL_KAFKA__BOOTSTRAP_SERVERS``,
    ``VIGIL_KAFKA__CLIENT__SASL_MECHANISM``), as nested tables; names are case-insensitive.
    Variables that name no section (``VIGIL_CONFIG``, ``VIGIL_MASTER_KEYS``) are not keys."""
    env = dict(os.environ if environ is None else environ)
    try:
        return dict(_Environment(env)())
    except (SettingsError, ValueError) as exc:
        raise ConfigError(f"environment: invalid {ENV_PREFIX}* variable: {exc}") from None


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (tests pass their own)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._given = environ
        super().__init__(
            VigilConfig,  # type: ignore[arg-type]  # only its fields are read
            case_sensitive=False,
            env_prefix=ENV_PREFIX,
            env_nested_delimiter="__",
        )

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._given.items()}


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> VigilConfig:
    """The configuration: built-in defaults, under the file (``path``, else ``$VIGIL_CONFIG``,
    else ``./vigil.toml``), under ``VIGIL_<SECTION>__<KEY>`` variables. A file named
    explicitly (argument or variable) must exist."""
    found = config_file(path, environ=environ, cwd=cwd)
    data: dict[str, Any] = {}
    source = "defaults"
    if found is not None:
        try:
            data = tomllib.loads(found.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{found}: no such configuration file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{found}: cannot read: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{found}: not valid TOML: {exc}") from None
        source = str(found)
    overrides = env_overrides(environ)
    if overrides:
        data = _deep_merge(data, overrides)
        source = f"{source} with {ENV_PREFIX}* variables"
    return parse_config(data, source=source)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = _deep_merge(below, value)
        else:
            merged[key] = value
    return merged


_log = logging.getLogger("vigil.config")


def parse_config(data: Mapping[str, Any], source: str = "configuration") -> VigilConfig:
    """Validate already-parsed TOML data. A stale ``[[schedule]]`` table (the old static schedule
    file's) is ignored with one warning line: schedules are records now, never configuration."""
    if isinstance(data.get("schedule"), list):
        data = {key: value for key, value in data.items() if key != "schedule"}
        _log.warning(
            "%s: [[schedule]] is ignored: schedules are records now; "
            "create them with `vigil schedule` (docs/operations.md#upgrades)",
            source,
        )
    try:
        return VigilConfig.model_validate(data)
    except ValidationError as exc:
        lines = [f"  {_error_key(error, data)}: {_message(error)}" for error in exc.errors()]
        raise ConfigError(f"{source}: invalid configuration\n" + "\n".join(lines)) from None


def _error_key(error: ErrorDetails, data: Mapping[str, Any]) -> str:
    """The dotted key an error names: its location's, and a rules model's own field below."""
    key = _key(error["loc"], data)
    field = (error.get("ctx") or {}).get("field")
    if error["type"] == RULES_ERROR and field:
        return field if key == "(top level)" else f"{key}.{field}"
    return key


def _key(loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """The dotted key a pydantic location points at, without union tags and validator names."""
    parts: list[str] = []
    node: Any = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, Mapping) and part in node:
            parts.append(str(part))
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int):
            parts.append(f"[{part}]")
            node = node[part] if part < len(node) else None
        elif last and isinstance(part, str) and part != "[key]" and "[" not in part:
            parts.append(part)  # a missing key
        # else: a discriminator tag or a validator's name, not a key of the file
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required"
    message = str(error["msg"])
    return message.removeprefix("Value error, ")
