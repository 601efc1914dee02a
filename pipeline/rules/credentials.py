"""Credential-looking values: what a definition must never hold where a reference is expected.

Owns :func:`credential_reason` and :func:`reject_credential`: values that look like a secret (URLs,
userinfo, authorization schemes, ``key=value`` secrets, token prefixes, high-entropy runs) are
refused at creation. Bounded (DESIGN.md §10): longer than :data:`MAX_SCANNED` is refused unscanned,
every expression is linear. It cannot prove a value is *not* a secret, and leaves reference charsets
to ``definition``."""

from __future__ import annotations

import math
import re
from collections import Counter

from pipeline.rules.errors import DefinitionError

__all__ = ["MAX_SCANNED", "credential_reason", "reject_credential"]

MAX_SCANNED = 4096
"""The longest value scanned; longer ones are refused unscanned (no reference is that long)."""

# A host ``name.tld[:port]/`` at the very start: the atomic group takes the whole host run and
# gives back only up to its last dot, once.
_URL = re.compile(
    r"^[A-Za-z][A-Za-z0-9+.\-]*+://|://|^www\.|^(?>[A-Za-z0-9.\-]*\.)[A-Za-z]{2,}+(?::\d++)?/"
)
# user:password@ — a match starts only where a whitespace-, @- or /-delimited run starts.
_USERINFO = re.compile(r"(?<![^\s@/])[^\s@/:]++:[^\s@/]*+@")
_AUTH_SCHEME = re.compile(r"^\s*+(?:bearer|basic|token|digest)\s++\S", re.IGNORECASE)
_SECRET_PAIR = re.compile(
    r"(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|auth|sig(?:nature)?|"
    r"session[_-]?key|private[_-]?key|client[_-]?secret)\s*+[=:]",
    re.IGNORECASE,
)
_TOKEN_PREFIX = re.compile(
    r"(?:^|[^A-Za-z0-9])(?:gh[pousr]_[A-Za-z0-9]{16,}+|github_pat_[A-Za-z0-9_]{16,}+|"
    r"xox[abpors]-[A-Za-z0-9-]{8,}+|sk-[A-Za-z0-9_-]{16,}+|AKIA[0-9A-Z]{16}|"
    r"eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+|(?<!\d)\d{6,}+:[A-Za-z0-9_-]{30,}+)"
)
_RUN = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{24,}+")
_MIN_ENTROPY_BITS = 3.5


def _entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _high_entropy_run(value: str) -> bool:
    """A long run mixing letters and digits with near-random entropy: an API key or hash."""
    for run in _RUN.findall(value):
        has_letter = any(c.isalpha() for c in run)
        has_digit = any(c.isdigit() for c in run)
        if has_letter and has_digit and _entropy(run) >= _MIN_ENTROPY_BITS:
            return True
    return False


def credential_reason(value: str) -> str | None:
    """Why ``value`` looks like a credential, or ``None`` if it does not."""
    if len(value) > MAX_SCANNED:
        return f"is longer than {MAX_SCANNED} characters"
    if _URL.search(value):
        return "looks like a URL; name a configured destination or tool instead"
    if _USERINFO.search(value):
        return "looks like user:password@host credentials"
    if _AUTH_SCHEME.match(value):
        return "looks like an Authorization header value"
    if _SECRET_PAIR.search(value):
        return "looks like a key=value secret"
    if _TOKEN_PREFIX.search(value):
        return "looks like an API token"
    if _high_entropy_run(value):
        return "looks like a long random secret"
    return None


def reject_credential(value: str, field: str) -> str:
    """Return ``value`` unchanged, or raise :class:`DefinitionError` naming ``field``."""
    reason = credential_reason(value)
    if reason is not None:
        raise DefinitionError(f"{reason} (references must be opaque registry names)", field)
    return value
