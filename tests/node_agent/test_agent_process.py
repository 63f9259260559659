"""The real ``custom-metrics-server node-agent`` process over HTTPS, reading a real gRPC CRI
server on a unix socket and the host's /proc."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from custom_metrics_server.kubelet_format.rows import read_usage_rows
from tests.fakes.cri_runtime import FakeCriRuntime, world_from_summary
from tests.node_agent.samples import CASES, families, go_order, sample_path

pytestmark = pytest.mark.integration


@dataclass
class Agent:
    url: str
    process: subprocess.Popen[str]
    ca_file: Path

    def client(self) -> httpx.AsyncClient:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        return httpx.AsyncClient(base_url=self.url, verify=context, timeout=10)


def start_agent(workdir: Path, *args: str) -> Agent:
    """Start ``node-agent`` with ``args`` (put ``--secure-port`` there to override 0)."""
    command = [
        sys.executable,
        "-m",
        "custom_metrics_server",
        "node-agent",
        "--secure-port",
        "0",
        "--cert-dir",
        str(workdir / "certs"),
        *args,
    ]
    with open(workdir / "agent.log", "w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    assert process.stdout is not None
    line = process.stdout.readline()  # the banner, once the socket is bound
    if " serving " not in line:
        process.kill()
        process.wait()
        process.stdout.close()
        raise RuntimeError(f"agent did not start: {line!r}\n{(workdir / 'agent.log').read_text()}")
    url = line.split(" serving ", 1)[1].split("/metrics/resource")[0]
    return Agent(url, process, workdir / "certs" / "apiserver.crt")


def _swapless_host() -> bool:
    lines = Path("/proc/meminfo").read_text().splitlines()
    values = {line.split(":")[0]: line.split()[1] for line in lines}
    return values.get("SwapTotal", "0") == "0" and values.get("SwapFree", "0") == "0"


def stop_agent(agent: Agent) -> None:
    agent.process.terminate()
    try:
        assert agent.process.wait(timeout=15) == 0
    finally:
        if agent.process.poll() is None:
            agent.process.kill()
        if agent.process.stdout is not None:
            agent.process.stdout.close()


@pytest.fixture
async def agent(runtime: FakeCriRuntime, tmp_path: Path) -> AsyncIterator[Agent]:
    started = await asyncio.to_thread(
        start_agent,
        tmp_path,
        "--cri-endpoint",
        runtime.endpoint,
        "--cri-timeout",
        "1s",
        "--bind-address",
        "127.0.0.1",
    )
    yield started
    stop_agent(started)


async def test_serves_the_kubelet_body_healthz_and_own_metrics(
    runtime: FakeCriRuntime, agent: Agent
) -> None:
    case = "07_nil_container_metrics"
    summary = CASES[case]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    async with agent.client() as client:
        response = await client.get("/metrics/resource")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        body = response.text
        # Pods exactly as the sample; the node's totals come from this machine's /proc; the
        # sample's legacy `scrape_error` is not kubelet 1.36's; and on a host without swap the
        # containers get the kubelet's zero swap (the fake runtime reports none).
        node = {"node_cpu_usage_seconds_total", "node_memory_working_set_bytes"}
        node |= {"node_swap_usage_bytes"}
        swap = {"container_swap_usage_bytes", "container_swap_limit_bytes", "pod_swap_usage_bytes"}
        without = frozenset(node | swap | {"scrape_error"})
        sample = sample_path(case).read_text()
        assert go_order(body, without=without) == go_order(sample, without=without)
        assert node <= set(families(body))
        assert "scrape_error" not in families(body)
        if (swap & set(families(body))) - set(families(sample)):
            assert _swapless_host()
            for name in swap - set(families(sample)):
                assert all(line.split()[1] == "0" for line in families(body)[name].splitlines()[2:])
        scrape = read_usage_rows(response.content, default_time=time.time())
        assert scrape.node is not None
        assert abs(scrape.node.cpu.timestamp - time.time()) < 60
        assert (await client.get("/healthz")).text == "ok"
        own = (await client.get("/metrics")).text
        assert "node_agent_collections_total 1.0" in own
        assert "node_agent_runtime_up 1.0" in own
        assert (await client.get("/nope")).status_code == 404
        assert (await client.post("/metrics/resource")).status_code == 405

        await runtime.stop()
        await asyncio.sleep(1.1)  # past --stats-cache-duration: the probe collects again
        for path in ("/healthz", "/readyz"):
            health = await client.get(path)
            assert health.status_code == 503
            assert health.text.startswith("no figures to serve: container runtime: ")
        down = await client.get("/metrics/resource")
        error = sample_path("01_error_getting_summary").read_text()
        assert down.content == go_order(error, without=frozenset({"scrape_error"}))
        assert "node_agent_runtime_up 0.0" in (await client.get("/metrics")).text

        await runtime.start()  # /healthz sees the runtime back, and so does the gauge
        for _ in range(100):
            if (await client.get("/healthz")).status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert "node_agent_runtime_up 1.0" in (await client.get("/metrics")).text


def test_bad_endpoint_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "node-agent",
            "--cri-endpoint",
            "tcp://x:1",
            "--cert-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "unsupported CRI endpoint" in result.stderr


async def test_silent_connections_are_closed_by_the_handshake_timeout(agent: Agent) -> None:
    """The agent listens on every node without authentication: a connection that never
    starts TLS is closed after the shared 10 s handshake timeout (asyncio's default is 60 s),
    while a real client is served meanwhile."""
    host, port = agent.url.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    started = time.monotonic()
    async with agent.client() as client:
        assert (await client.get("/healthz")).status_code in (200, 503)
    closed = await asyncio.wait_for(reader.read(1), timeout=30)
    assert closed == b""
    assert 8 < time.monotonic() - started < 25
    writer.close()
