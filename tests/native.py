"""The two hot paths side by side: a context that runs modules on the Python path, and the
native module when this process has it (``pipeline.rules.native``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from pipeline.rules.native import NATIVE

__all__ = ["needs_native", "python_path"]

needs_native = pytest.mark.skipif(NATIVE is None, reason="vigil_native is not built")


@contextmanager
def python_path(*modules: ModuleType) -> Iterator[None]:
    """Inside, ``modules`` (each holding ``NATIVE`` from ``pipeline.rules.native``) run the
    pure-Python rules, whatever path the process runs."""
    saved: list[tuple[ModuleType, Any]] = [(module, vars(module)["NATIVE"]) for module in modules]
    try:
        for module in modules:
            vars(module)["NATIVE"] = None
        yield
    finally:
        for module, value in saved:
            vars(module)["NATIVE"] = value
