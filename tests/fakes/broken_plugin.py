"""Test-only: a plugin whose import fails, as one missing its driver would."""

from __future__ import annotations

import importlib

importlib.import_module("psycopg_not_installed_here")


def make(settings: object) -> object:  # pragma: no cover - never imported successfully
    """Never reached."""
    return object()
