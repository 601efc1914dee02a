"""The subject keywords (``tenant_id``, ``user_id``) that definition checks take, typed so a test
can spread one ``SUBJECT`` dict into them; the subject itself is ``pipeline.rules.authz``'s."""

from __future__ import annotations

from typing import TypedDict

__all__ = ["SubjectKeywords"]


class SubjectKeywords(TypedDict):
    tenant_id: str
    user_id: str
