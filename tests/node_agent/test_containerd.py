"""The CRI client against a real containerd (Debian's package), started for the test with
its own root, state and socket under /tmp and the CRI plugin on the ``native`` snapshotter
(no overlay mounts), no cgroups and no CNI: enough for ``Version`` and empty stats lists.

Skipped, with the reason, when containerd is not installed or cannot start here (it needs
root); ``.ci/run`` installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from custom_metrics_server.node_agent.collector import Collector
from custom_metrics_server.node_agent.runtime import RuntimeClient
from tests.node_agent.samples import go_order, sample_path

pytestmark = pytest.mark.integration

CONFIG = """\
version = 2
root = "{dir}/root"
state = "{dir}/state"
[grpc]
  address = "{dir}/containerd.sock"
[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  disable_cgroup = true
  disable_tcp_service = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
"""


@pytest.fixture(scope="module")
def containerd() -> Iterator[str]:
    binary = shutil.which("containerd")
    if binary is None:
        pytest.skip("containerd is not installed (Debian: apt-get install containerd)")
    if os.geteuid() != 0:
        pytest.skip("containerd needs root to start (its root and state directories, mounts)")
    work = Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))  # short: a socket path
    (work / "config.toml").write_text(CONFIG.format(dir=work))
    log = (work / "containerd.log").open("w")
    process = subprocess.Popen(
        [binary, "--config", str(work / "config.toml")], stdout=log, stderr=subprocess.STDOUT
    )
    socket_path = work / "containerd.sock"
    deadline = time.monotonic() + 30
    try:
        while not socket_path.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (work / "containerd.log").read_text()[-2000:]
                pytest.skip(f"containerd could not start here (exit {process.poll()}): {tail}")
            time.sleep(0.1)
        if "io.containerd.grpc.v1.cri" not in (work / "containerd.log").read_text():
            time.sleep(1)  # the CRI plugin logs as it loads, just before serving
        yield f"unix://{socket_path}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


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
