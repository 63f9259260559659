"""The node agent on the realnode: the real containerd 1.6 CRI socket, a pod deleted under it,
and its series beside the real kubelet's for the same containers.

Bounds, and why: the kubelet's container figures are cAdvisor's (a housekeeping sample up to
~15 s old), the agent's are containerd's read at the scrape; both read the same cgroup
counters, so a CPU counter may differ by at most what the container can burn between the
two timestamps (the host's cores x the gap, plus 50 ms for rounding) and must be ordered as
its timestamps are; start times are the same instant (1 ms); memory working sets of these
steady containers (a shell sleeping in a loop, ``memhog`` holding 32 MiB) within 1 MiB or
5 %, whichever is larger (a shell forks ``sleep`` every second: a few pages come and go).
"""

from __future__ import annotations

import os
import re
import secrets
import ssl
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from custom_metrics_server.node_agent.cri import api_pb2 as cri
from custom_metrics_server.node_agent.cri import api_pb2_grpc as cri_grpc
from tests.node_agent.test_agent_process import Agent, start_agent, stop_agent
from tests.realnode.test_agent_vs_kubelet import PAUSE_CPU, PAUSE_MEMORY, racy_runtime

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(400)]

_LINE = re.compile(r"^(?P<name>[a-z_]+)(?P<labels>\{[^}]*\})? (?P<value>\S+)(?: (?P<ts>\d+))?$")
Series = dict[tuple[str, str], tuple[float, int | None]]

_POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: localhost/realnode/busybox:1.35.0
    imagePullPolicy: Never
    command: ["sh", "-c", "while :; do sleep 1; done"]
"""


def parse(body: str) -> Series:
    """A ``/metrics/resource`` body's samples: (family, labels) -> (value, ms timestamp)."""
    found: Series = {}
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match is not None, line
        ts = match["ts"]
        found[(match["name"], match["labels"] or "")] = (
            float(match["value"]),
            int(ts) if ts else None,
        )
    return found


def _runtime_view(
    stub: Any, namespace: str, *, ask_stats: bool
) -> tuple[dict[str, tuple[str, int]], str | None]:
    """The namespace's sandboxes by pod name (id, state), as containerd lists them, and the
    error of an unfiltered ListPodSandboxStats (None: it answered, or was not asked: never of
    a containerd that the call can crash)."""
    sandboxes = stub.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=10).items
    listed = {
        s.metadata.name: (s.id, s.state) for s in sandboxes if s.metadata.namespace == namespace
    }
    if not ask_stats:
        return listed, None
    try:
        stub.ListPodSandboxStats(cri.ListPodSandboxStatsRequest(), timeout=10)
    except grpc.RpcError as err:
        return listed, f"{err.code().name}: {err.details()}"
    return listed, None


def _apply(realnode: Any, namespace: str, name: str, tmp_path: Path) -> None:
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(_POD.format(name=name))
    realnode.kubectl("apply", "-n", namespace, "-f", str(manifest))


def _kubelet(realnode: Any) -> Series:
    return parse(
        realnode.kubectl("get", "--raw", f"/api/v1/nodes/{realnode.node}/proxy/metrics/resource")
    )


def _compare(agent: Series, kubelet: Series, namespace: str, *, summed: bool) -> int:
    """Assert the bounds of the module on every container and pod series of `namespace`
    both report; how many were compared. Other namespaces are left out: earlier tests delete
    theirs without waiting, and a terminating pod's memory falls between the agent's read
    and the kubelet's older sample. `summed`: the agent sums pods over their running
    containers (ListContainerStats), so a pod lacks its pause container's CPU and memory,
    which the kubelet's pod cgroup counts."""
    cores = os.cpu_count() or 1
    compared = 0
    for key, (value, ts) in agent.items():
        name, labels = key
        if f'namespace="{namespace}"' not in labels or key not in kubelet:
            continue
        other, other_ts = kubelet[key]
        compared += 1
        pause = summed and name.startswith("pod_")
        cpu_slack = PAUSE_CPU if pause else 0.0
        memory_slack = PAUSE_MEMORY if pause else 0
        if name == "container_start_time_seconds":
            assert abs(value - other) <= 0.001, (key, value, other)
        elif name.endswith("_cpu_usage_seconds_total"):
            assert ts is not None
            assert other_ts is not None
            gap = abs(ts - other_ts) / 1000
            assert abs(value - other) <= cores * gap + 0.05 + cpu_slack, (key, value, other, gap)
            if ts > other_ts:
                assert value >= other - 1e-9 - cpu_slack, (key, value, other)
        elif name.endswith("_memory_working_set_bytes"):
            bound = max(1 << 20, 0.05 * other) + memory_slack
            assert abs(value - other) <= bound, (key, value, other)
        elif "_swap_" in name:
            assert value == other == 0, (key, value, other)
    return compared


def test_agent_keeps_serving_after_a_pod_is_deleted(realnode: Any, tmp_path: Path) -> None:
    namespace = f"wipnode-{secrets.token_hex(3)}"
    realnode.kubectl("create", "namespace", namespace)
    agent: Agent | None = None
    try:
        for name in ("keeper", "victim"):
            _apply(realnode, namespace, name, tmp_path)
        realnode.kubectl(
            "wait", "-n", namespace, "--for=condition=Ready", "pod/keeper", "pod/victim",
            "--timeout=120s",
        )  # fmt: skip
        agent = start_agent(
            tmp_path,
            "--cri-endpoint",
            f"unix://{realnode.containerd_sock}",
            "--bind-address",
            "127.0.0.1",
            "--cri-timeout",
            "5s",
        )
        log = tmp_path / "agent.log"
        context = ssl.create_default_context(cafile=str(agent.ca_file))
        keeper = f'namespace="{namespace}",pod="keeper"'
        victim = f'namespace="{namespace}",pod="victim"'
        with httpx.Client(base_url=agent.url, verify=context, timeout=30) as client:
            for _ in range(60):
                body = client.get("/metrics/resource").text
                if keeper in body and victim in body:
                    break
                time.sleep(1)
            assert victim in body
            containerd_16 = "containerd 1.6." in log.read_text()
            channel = grpc.insecure_channel(f"unix://{realnode.containerd_sock}")
            cri_stub = cri_grpc.RuntimeServiceStub(channel)
            racy = racy_runtime(cri_stub)
            if racy:  # containerd 1.6.0-1.6.21: the agent never asks it for sandbox stats
                assert "using ListContainerStats instead" in log.read_text()

            realnode.kubectl("delete", "pod", "-n", namespace, "victim", "--wait=false")
            list_failed = False  # containerd failed the list while the agent served
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                listed, failure = _runtime_view(cri_stub, namespace, ask_stats=not racy)
                if "victim" not in listed:
                    break  # the kubelet removed the sandbox: the episode is over
                response = client.get("/metrics/resource")
                assert response.status_code == 200
                series = parse(response.text)
                # Served, not blind: no error, the other pods' series all there.
                assert series[("resource_scrape_error", "")][0] == 0
                assert ("scrape_error", "") not in series
                cpu = f'{{container="main",{keeper}}}'
                assert ("container_cpu_usage_seconds_total", cpu) in series
                assert ("pod_memory_working_set_bytes", f"{{{keeper}}}") in series
                assert client.get("/readyz").status_code == 200
                victim_id = listed["victim"][0]
                if failure is not None and f'sandbox "{victim_id}"' in failure:
                    list_failed = True  # because of the deleted pod's own sandbox
                    assert "answered ListPodSandboxStats with an error" in log.read_text()
                time.sleep(1)
            channel.close()
            if containerd_16 and not racy:
                # containerd 1.6 failed the list while the sandbox was NOTREADY (seen by
                # asking it directly), and the agent served the other pods all along.
                assert list_failed, log.read_text()
            assert "does not answer" not in log.read_text()

            # The agent's series beside the kubelet's for the same containers.
            kubelet = _kubelet(realnode)
            mine = parse(client.get("/metrics/resource").text)
            assert not any(victim in labels for _, labels in mine)
            compared = _compare(mine, kubelet, namespace, summed=racy)
            keeper_keys = [key for key in mine if keeper in key[1]]
            assert keeper_keys
            assert all(key in kubelet for key in keeper_keys), keeper_keys
            assert compared >= len(keeper_keys)
    finally:
        if agent is not None:
            stop_agent(agent)
        realnode.kubectl("delete", "namespace", namespace, "--wait=false")
