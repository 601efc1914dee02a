"""Unit tests of ``consumers`` (pure: no servers)."""
