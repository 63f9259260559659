"""The CRI client against a real containerd (Debian's package), started for the test with
its own root, state and socket under /tmp and the CRI plugin on the ``native`` snapshotter
(no overlay mounts), no cgroups and no CNI: enough for ``Version`` and empty stats lists.

Skipped, with the reason, when containerd is not installed or cannot start here (it needs
root); ``.ci/run`` installs it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from custom_metrics_server.node_agent.collector import Collector
from custom_metrics_server.node_agent.runtime import RuntimeClient
from tests.node_agent.samples import go_order, sample_path
from tests.private_containerd import private_containerd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def containerd() -> Iterator[str]:
    with private_containerd(pytest.skip, snapshotter="native") as work:
        if "io.containerd.grpc.v1.cri" not in (work / "containerd.log").read_text():
            time.sleep(1)  # the CRI plugin logs as it loads, just before serving
        yield f"unix://{work / 'containerd.sock'}"


async def test_version_and_empty_stats_from_containerd(containerd: str) -> None:
    async with RuntimeClient(containerd, timeout=5) as client:
        version = await client.version()
        assert version.runtime_name == "containerd"
        assert version.runtime_api_version == "v1"
        assert await client.pods() == ()
        body = await Collector(client.pods, None, max_age=0).body()
    # No pods, no node: what a kubelet with nothing to report writes.
    # (kubelet 1.36's body: without the upstream sample's legacy `scrape_error`)
    legacy = frozenset({"scrape_error"})
    assert body == go_order(sample_path("09_nil_pod_metrics").read_text(), without=legacy)
