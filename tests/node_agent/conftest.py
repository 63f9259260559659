"""A fake CRI runtime on a short unix socket path (sun_path holds 107 bytes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.fakes.cri_runtime import FakeCriRuntime


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cri-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def runtime(socket_dir: Path) -> AsyncIterator[FakeCriRuntime]:
    async with FakeCriRuntime(socket_dir / "cri.sock") as fake:
        yield fake
