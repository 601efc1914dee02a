"""The shared reference vectors (``shared/vectors.json``), loaded once for every test."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["VECTORS"]


def _find() -> Path:
    here = Path(__file__).resolve().parent
    candidates = [Path(os.environ["VIGIL_VECTORS"])] if "VIGIL_VECTORS" in os.environ else []
    candidates += [here / "data" / "vectors.json", here.parent.parent / "shared" / "vectors.json"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("vectors.json not found (tests/data/ or ../shared/)")


VECTORS: dict[str, Any] = json.loads(_find().read_text(encoding="utf-8"))
