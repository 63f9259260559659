"""Shared fixtures: the contract fixture as an in-process app, and real server processes."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.security.gate import Gate
from custom_metrics_server.server.app import Server, create_app
from custom_metrics_server.testing.server_process import (
    ServerProcess,
    start_server,
    stop_server,
)

FIXTURES = Path(__file__).parent / "fixtures"
CONTRACT_FIXTURE = FIXTURES / "contract.yaml"


def contract_app(gate: Gate | None = None) -> Server:
    """The app serving the contract's test-vector fixture, in process (with `gate`, if given)."""
    cluster, backend = load_fixture(yaml.safe_load(CONTRACT_FIXTURE.read_text()), now=time.time())
    return create_app(cluster=cluster, backends=[backend], gate=gate)


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Each test gets the logging set-up it found: tests that run the CLI in process call
    `configure_logging` (root level, handlers), which would otherwise leak into every later
    test in random order (caplog then captures INFO lines it did not ask for)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    levels = {
        name: logger.level
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger):
            logger.setLevel(levels.get(name, logging.NOTSET))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The random order's seed last, where a failure's reader looks (pytest-randomly prints it
    only in the header, which -q hides)."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None and not getattr(config.option, "randomly_dont_reorganize", False):
        terminalreporter.write_line(
            f"tests ran in random order, seed {seed}: rerun it with -p randomly --randomly-seed={seed}"
        )


@pytest.fixture
async def asgi_client() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client talking to the contract app through ASGI (no sockets)."""
    transport = httpx.ASGITransport(app=contract_app())
    async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
        yield client


@pytest.fixture(scope="session")
def contract_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The real server process serving the contract fixture."""
    server = start_server(tmp_path_factory.mktemp("contract"), "--demo-file", str(CONTRACT_FIXTURE))
    yield server
    stop_server(server)


@pytest.fixture(scope="session")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The real server process serving the simulated cluster."""
    server = start_server(tmp_path_factory.mktemp("demo"), "--demo-pods", "80")
    yield server
    stop_server(server)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the real-node tier (`realnode` marker) out unless `-m` names it: `make test`
    and `make unit` do not run it, `make test-node` (`-m realnode`) does."""
    if "realnode" in (config.option.markexpr or ""):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("realnode") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
