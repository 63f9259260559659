"""Fixtures of the HTTP client tests: the scripted server the Prometheus tests also answer with."""

from __future__ import annotations

from tests.prometheus.scripted import serve  # noqa: F401 - the scripted-server fixture
