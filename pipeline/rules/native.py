"""Which hot path this process runs: the compiled accelerator or the pure-Python rules.

``vigil_native`` (DESIGN.md §10 "Compiled hot path") must answer byte for byte as the Python rules,
which stay the specification and fallback. ``VIGIL_NATIVE``: unset or ``auto`` uses it when it
imports, ``0`` forces Python, ``1`` requires it (:class:`ImportError` otherwise). Owns the choice
and its description (``python -m pipeline.rules.native``); each piece's use is its own module's."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Final

__all__ = ["NATIVE", "describe", "path_name"]

_CHOICES: Final = ("", "auto", "0", "1")


def _load() -> tuple[ModuleType | None, str]:
    """The module (or None) and why the Python path runs when it does."""
    choice = os.environ.get("VIGIL_NATIVE", "").strip().lower()
    if choice not in _CHOICES:
        raise ImportError(f"VIGIL_NATIVE={choice!r}: one of 0, 1, auto")
    if choice == "0":
        return None, "VIGIL_NATIVE=0"
    try:
        import vigil_native
    except ImportError as exc:
        if choice == "1":
            raise ImportError(
                "VIGIL_NATIVE=1 but vigil_native is not built: run `make native` (needs cargo)"
            ) from exc
        return None, "vigil_native is not built (make native, with cargo)"
    return vigil_native, ""


_module, _why = _load()
NATIVE: Final[Any] = _module
"""The ``vigil_native`` module when this process runs the native path, else None."""


def path_name() -> str:
    """``"native"`` or ``"python"``: the value of the hot-path metric and doctor check."""
    return "python" if NATIVE is None else "native"


def describe() -> str:
    """One line naming the path this process runs, and why when it is the Python one."""
    if NATIVE is None:
        return f"hot path: python ({_why})"
    return f"hot path: native (vigil_native {NATIVE.__version__})"


if __name__ == "__main__":
    print(describe())
