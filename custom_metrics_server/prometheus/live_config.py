"""The Prometheus backend's configuration in force: read, compiled, reloaded when its file
changes, with one HTTP client per configured server.

This module owns :class:`LiveConfig`: the first load (a broken file fails start-up), the
reload (a broken file is logged and counted once per broken version, and the last good
configuration stays in force), and the clients, kept across a reload for every server whose
settings did not change and closed when a reload drops them. It must not list series or
answer requests (:mod:`.backend` does), and it reads the file only when asked.

Its records go to the backend's logger (``custom_metrics_server.prometheus.backend``), where
operators already look for reloads.

Cost: a reload reads and hashes the file (O(size)); it compiles only when the content changed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from custom_metrics_server.prometheus.client import PrometheusClient
from custom_metrics_server.prometheus.rules import AdapterConfig, ConfigError, ServerConfig
from custom_metrics_server.prometheus.rules_config import parse_config
from custom_metrics_server.prometheus.self_metrics import BackendMetrics

__all__ = ["LiveConfig"]

logger = logging.getLogger("custom_metrics_server.prometheus.backend")


class LiveConfig:
    """The last good configuration and its clients; :meth:`reload` swaps in a changed file
    and calls ``changed`` (the backend relists at once)."""

    def __init__(
        self,
        *,
        path: Path | None,
        text: str | None,
        default_server: ServerConfig | None,
        query_timeout: float,
        retries: int,
        verb: Literal["GET", "POST"],
        metrics: BackendMetrics,
        changed: Callable[[], None],
    ) -> None:
        self._path = path
        self._text = text
        self._default_server = default_server
        self._query_timeout = query_timeout
        self._retries = retries
        self._verb: Literal["GET", "POST"] = verb
        self._metrics = metrics
        self._changed = changed
        self._config = AdapterConfig()
        self._digest = b""
        self._clients: dict[str, PrometheusClient] = {}

    @property
    def config(self) -> AdapterConfig:
        """The configuration in force (the last good one)."""
        return self._config

    @property
    def loaded(self) -> bool:
        """Whether a configuration took effect (it has at least the default server)."""
        return bool(self._clients)

    def client(self, server: str) -> PrometheusClient:
        """The client of a configured server (KeyError if it is not configured)."""
        return self._clients[server]

    def client_or_none(self, server: str) -> PrometheusClient | None:
        """The client of a server, or None when a reload dropped it."""
        return self._clients.get(server)

    def load(self) -> AdapterConfig:
        """Read and compile the configuration; raises `ConfigError` (startup fails on it)."""
        text, digest = self._read()
        config = self._parse(text)
        # Called before the event loop runs (startup): there are no clients to close yet.
        self._apply(config, digest)
        return config

    async def reload(self) -> bool:
        """Re-read the configuration if it changed; True when a new one took effect."""
        try:
            text, digest = self._read()
        except ConfigError as err:
            self._reload_failed(str(err))
            return False
        if digest == self._digest:
            return False
        try:
            config = self._parse(text)
        except ConfigError as err:
            self._reload_failed(str(err))
            self._digest = digest  # report once per broken version
            return False
        for unused in self._apply(config, digest):
            await unused.aclose()
        self._metrics.reloads.labels("success").inc()
        self._metrics.config_ok.set(1)
        logger.info(
            "prometheus config reloaded: %d rules, %d external rules",
            len(config.rules),
            len(config.external_rules),
        )
        self._changed()
        return True

    async def aclose(self) -> None:
        """Close every client."""
        for client in self._clients.values():
            await client.aclose()

    def _parse(self, text: str) -> AdapterConfig:
        return parse_config(
            text,
            default_server=self._default_server,
            source=str(self._path or "the configuration"),
        )

    def _read(self) -> tuple[str, bytes]:
        if self._text is not None:
            text = self._text
        elif self._path is not None:
            try:
                text = self._path.read_text(encoding="utf-8")
            except OSError as err:
                raise ConfigError(f"cannot read {self._path}: {err}") from None
        else:
            text = ""
        return text, hashlib.sha256(text.encode()).digest()

    def _apply(self, config: AdapterConfig, digest: bytes) -> list[PrometheusClient]:
        """Swap in a configuration; returns the clients it no longer uses (to be closed)."""
        for warning in config.warnings:
            logger.warning("prometheus config: %s", warning)
        old = self._clients
        self._clients = {}
        for name, server in config.servers.items():
            previous = old.get(name)
            if previous is not None and previous.server == server:
                self._clients[name] = old.pop(name)
            else:
                self._clients[name] = PrometheusClient(
                    server,
                    timeout=self._query_timeout,
                    retries=self._retries,
                    verb=self._verb,
                    observe=self._metrics.observe,
                )
        self._config = config
        self._digest = digest
        return list(old.values())

    def _reload_failed(self, message: str) -> None:
        self._metrics.reloads.labels("failure").inc()
        self._metrics.config_ok.set(0)
        logger.error("prometheus config not reloaded, keeping the last good one: %s", message)
