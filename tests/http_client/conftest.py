"""Fixtures of the HTTP client tests: the scripted server the Prometheus tests also answer with,
and a real forward proxy (`connect_proxy.py`)."""

from __future__ import annotations

from tests.http_client.connect_proxy import clean_environment, proxy  # noqa: F401 - fixtures
from tests.prometheus.scripted import serve  # noqa: F401 - the scripted-server fixture
