"""Fixtures of the scraping tests: a real forward proxy (`tests/http_client/connect_proxy.py`)."""

from __future__ import annotations

from tests.http_client.connect_proxy import clean_environment, proxy  # noqa: F401 - fixtures
