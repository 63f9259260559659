"""The node agent on the realnode's containerd (running containers, real cgroups) against the
real kubelet's `/metrics/resource` for the same containers, pods and node.

The test reads both endpoints in turn every ~0.2 s for about 30 s (two or more of the
kubelet's cAdvisor housekeeping periods) and then requires, for every sample of the agent:

* the same running containers of the workload's pods as the kubelet lists at that moment;
* `container_start_time_seconds` equal (both are containerd's `created_at`);
* every CPU counter (container, pod, node) between the kubelet's readings of the same counter
  just before and just after the agent's timestamp (5 ms margin for where, around its
  timestamp, each reader took the counter): both read one cgroup counter on one clock, and it
  never decreases, so this holds exactly whatever the load;
* every container working set among the values the kubelet reported within 0.5 s of it (the
  kubelet reads containers live), every pod working set between the kubelet's readings just
  before and after (its pod figures are cAdvisor's, one per housekeeping), within 1 MiB or
  2 % for the pages that come and go between them (cAdvisor's first reading of a new pod, 0,
  is no reading).

The node's working set is a separate test: the kubelet's is cAdvisor's root cgroup
(`usage - total_inactive_file`); the agent reads the same root cgroup and must agree within
10 % of the kubelet's readings before and after (the host's memory moves between them). The
agent writes every series the kubelet writes (the kubelet 1.36 writes the swap series as 0 on
a host without swap).

A pod deleted moments before (earlier tests delete many) leaves a sandbox whose cgroup is
gone; containerd 1.6 then fails the whole `ListPodSandboxStats`, and the agent asks each
ready sandbox on its own, so no scrape error may be seen at all.
"""

from __future__ import annotations

import re
import ssl
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
import httpx
import pytest

from custom_metrics_server.node_agent.cri import api_pb2 as cri
from custom_metrics_server.node_agent.cri import api_pb2_grpc as cri_grpc
from custom_metrics_server.node_agent.runtime import RuntimeVersion
from tests.node_agent.test_agent_process import start_agent, stop_agent
from tests.realnode.node import (
    NS_PREFIX,
    SPIN,
    RealNode,
    busybox_container,
    deployment,
    namespace,
    wait_ready,
)

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

NS = f"{NS_PREFIX}agent"
RECORD_SECONDS = 30.0
MARGIN = 0.005
#: What a pod's working set may move between two of cAdvisor's readings (page cache made
#: active or inactive, a shell's pages): 1 MiB, or 2 % if more.
POD_MEMORY_SLACK = 1 << 20
#: CPU seconds a pod's cgroup counts beyond its running containers' when the agent sums
#: containers: the pause container's, which starts the sandbox and then sleeps (milliseconds)
PAUSE_CPU = 0.1
#: and its working set (about half a MiB)
PAUSE_MEMORY = 1 << 20
#: Pods this young still settle (memory being touched, cAdvisor's first samples).
SETTLE_SECONDS = 10.0
_LINE: Final = re.compile(r"^([a-z_]+)(\{[^}]*\})? (\S+)(?: (\d+))?$")

Key = tuple[str, str]  # family, labels


@dataclass
class Readings:
    """One endpoint's samples over the recording: (timestamp s, value) per series, and the
    series seen in each answer."""

    series: dict[Key, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    answers: list[tuple[float, set[Key]]] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    #: containerd's error for a stats list over a dead sandbox, seen while the agent erred.
    dead_sandbox: str | None = None
    #: the agent sums pods over their running containers (ListContainerStats: a containerd
    #: that ListPodSandboxStats can crash), so a pod's CPU lacks what the pod cgroup also
    #: counts: the pause container's
    summed: bool = False

    def add(self, body: str, read_at: float) -> None:
        seen = set()
        for line in body.splitlines():
            match = _LINE.match(line)
            if line.startswith("#") or match is None:
                continue
            name, labels, value, stamp = match.groups()
            key = (name, labels or "")
            seen.add(key)
            if name in ("resource_scrape_error", "scrape_error") and float(value):
                self.errors.append(read_at)
            points = self.series[key]
            when = int(stamp) / 1000 if stamp else read_at
            if not points or points[-1] != (when, float(value)):
                points.append((when, float(value)))
        self.answers.append((read_at, seen))


@pytest.fixture(scope="module")
def readings(
    realnode: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Readings, Readings]]:
    """(agent, kubelet) readings over the recording, with a workload of two pods."""
    workdir = tmp_path_factory.mktemp("agent")
    with namespace(realnode, NS) as ns:
        realnode.apply(
            deployment(
                ns,
                "pair",
                [
                    busybox_container("spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "50m"}),
                    busybox_container(
                        "hold",
                        ["memhog", "16"],
                        requests={"memory": "24Mi"},
                        limits={"memory": "48Mi"},
                    ),
                ],
            ),
            deployment(
                ns,
                "spin",
                [busybox_container("spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "100m"})],
            ),
        )
        wait_ready(realnode, ns, "app=pair", 1)
        wait_ready(realnode, ns, "app=spin", 1)
        time.sleep(SETTLE_SECONDS)  # a pause, not a deadline: see SETTLE_SECONDS
        agent = start_agent(
            workdir,
            "--cri-endpoint",
            f"unix://{realnode.containerd_sock}",
            "--bind-address",
            "127.0.0.1",
            "--stats-cache-duration",
            "0s",
        )
        agent_readings, kubelet_readings = Readings(), Readings()
        agent_readings.summed = "using ListContainerStats" in (workdir / "agent.log").read_text()
        try:
            context = ssl.create_default_context(cafile=str(agent.ca_file))
            with (
                httpx.Client(base_url=agent.url, verify=context, timeout=30) as agent_client,
                httpx.Client(
                    base_url=realnode.kubelet_url, verify=realnode.ssl_context(), timeout=30
                ) as kubelet,
            ):
                deadline = time.monotonic() + RECORD_SECONDS
                while time.monotonic() < deadline:
                    kubelet_readings.add(kubelet.get("/metrics/resource").text, time.time())
                    errors = len(agent_readings.errors)
                    agent_readings.add(agent_client.get("/metrics/resource").text, time.time())
                    if len(agent_readings.errors) > errors and agent_readings.dead_sandbox is None:
                        agent_readings.dead_sandbox = dead_sandbox(realnode)
                    time.sleep(0.1)
                kubelet_readings.add(kubelet.get("/metrics/resource").text, time.time())
        finally:
            stop_agent(agent)
        yield agent_readings, kubelet_readings


def dead_sandbox(realnode: RealNode) -> str | None:
    """containerd 1.6's error for a stats list that meets a sandbox whose cgroup is gone
    (not asked of a containerd that the call can crash: see `racy_runtime`)."""
    with grpc.insecure_channel(f"unix://{realnode.containerd_sock}") as channel:
        stub = cri_grpc.RuntimeServiceStub(channel)
        if racy_runtime(stub):
            return None
        try:
            stub.ListPodSandboxStats(cri.ListPodSandboxStatsRequest(), timeout=10)
        except grpc.RpcError as error:
            details = str(error.details())
            return details if "cgroup deleted" in details else None
    return None


def racy_runtime(stub: Any) -> bool:
    """Whether the node's runtime is a release that ``ListPodSandboxStats`` can crash
    (containerd 1.6.0-1.6.21, containerd#8130): the tests never call it there either."""
    answer = stub.Version(cri.VersionRequest(version="v1"), timeout=10)
    return RuntimeVersion(
        answer.runtime_name, answer.runtime_version, answer.runtime_api_version
    ).racy_sandbox_stats


def check_not_blinded(agent: Readings) -> None:
    """The agent served its figures all along. A sandbox whose cgroup is gone (a pod deleted
    moments ago: earlier tests delete many) makes containerd 1.6 fail the whole stats list;
    the agent then asks each ready sandbox on its own (issue 26), so it never reports an
    error for the node."""
    containerd = f" (containerd: {agent.dead_sandbox})" if agent.dead_sandbox else ""
    assert not agent.errors, (
        f"the agent reported a scrape error {len(agent.errors)} times{containerd}"
    )


def between(kubelet: list[tuple[float, float]], when: float) -> tuple[float, float] | None:
    """The kubelet's readings just before and just after `when` (None: not both)."""
    before = [value for stamp, value in kubelet if stamp <= when - MARGIN]
    after = [value for stamp, value in kubelet if stamp >= when + MARGIN]
    return (before[-1], after[0]) if before and after else None


def mine(key: Key) -> bool:
    return f'namespace="{NS}"' in key[1]


def workload(seen: set[Key]) -> set[Key]:
    """The workload's containers and pods in one answer (their CPU series' labels)."""
    return {
        k
        for k in seen
        if mine(k) and k[0] in ("container_cpu_usage_seconds_total", "pod_cpu_usage_seconds_total")
    }


def test_agent_series_match_the_kubelets(
    realnode: RealNode, readings: tuple[Readings, Readings]
) -> None:
    agent, kubelet = readings
    check_not_blinded(agent)
    problems: list[str] = []
    compared: dict[str, int] = defaultdict(int)
    # The same running containers and pods as the kubelet's answer just before.
    for read_at, seen in agent.answers:
        earlier = [s for t, s in kubelet.answers if t <= read_at]
        if earlier and workload(seen) != workload(earlier[-1]):
            problems.append(
                f"at {read_at}: agent {workload(seen)}, kubelet {workload(earlier[-1])}"
            )
    for key, points in agent.series.items():
        name, _ = key
        if not (mine(key) or name.startswith("node_cpu")):
            continue
        theirs = kubelet.series.get(key, [])
        if name == "container_start_time_seconds":
            values = {value for _, value in theirs}
            if {value for _, value in points} != values:
                problems.append(f"{key}: start {points} != kubelet's {values}")
            compared[name] += 1
            continue
        for when, value in points:
            if name.endswith("_cpu_usage_seconds_total"):
                bounds = between(theirs, when)
                if bounds is None:
                    continue
                compared[name] += 1
                low = bounds[0] - 1e-9
                if agent.summed and name == "pod_cpu_usage_seconds_total":
                    low -= PAUSE_CPU
                if not low <= value <= bounds[1] + 1e-9:
                    problems.append(f"{key}: {value} at {when} not within the kubelet's {bounds}")
            elif name == "container_memory_working_set_bytes":
                near = [v for t, v in theirs if abs(t - when) <= 0.5]
                if near:
                    compared[name] += 1
                    if not min(near) <= value <= max(near):
                        problems.append(
                            f"{key}: {value} at {when} outside the kubelet's {sorted(set(near))}"
                        )
            elif name == "pod_memory_working_set_bytes":
                # cAdvisor's first sample of a new pod says 0: not a reading.
                bounds = between([(t, v) for t, v in theirs if v > 0], when)
                if bounds is not None:
                    compared[name] += 1
                    slack = max(POD_MEMORY_SLACK, 0.02 * max(bounds))
                    if agent.summed:  # the pause container's working set is not in the sum
                        slack += PAUSE_MEMORY
                    low, high = min(bounds) - slack, max(bounds) + slack
                    if not low <= value <= high:
                        problems.append(
                            f"{key}: {value} at {when} outside the kubelet's {bounds} +- {slack}"
                        )
    assert not problems, "\n".join(problems[:30])
    # Each kind was compared for every container and pod (and the node), many times over.
    wanted = {
        "container_start_time_seconds": 3,
        "container_cpu_usage_seconds_total": 3 * 20,
        "container_memory_working_set_bytes": 3 * 20,
        "pod_cpu_usage_seconds_total": 2 * 10,
        "pod_memory_working_set_bytes": 2 * 10,
        "node_cpu_usage_seconds_total": 10,
    }
    short = {
        name: (compared[name], count) for name, count in wanted.items() if compared[name] < count
    }
    assert not short, f"too few comparisons (made, wanted): {short}"


def test_agent_node_memory_matches_the_kubelets(
    realnode: RealNode, readings: tuple[Readings, Readings]
) -> None:
    agent, kubelet = readings
    check_not_blinded(agent)
    key = ("node_memory_working_set_bytes", "")
    compared = 0
    for when, value in agent.series[key]:
        bounds = between(kubelet.series[key], when)
        if bounds is None:
            continue
        compared += 1
        low, high = min(bounds) * 0.9, max(bounds) * 1.1
        assert low <= value <= high, (
            f"node working set {value} at {when}: the kubelet's {bounds} (10 %)"
        )
    assert compared >= 10, compared


def test_agent_serves_the_kubelets_series(
    realnode: RealNode, readings: tuple[Readings, Readings]
) -> None:
    """Every series the kubelet writes for the workload, the agent writes too (and no other),
    with the same values where they are constants (swap on a host without swap)."""
    agent, kubelet = readings
    check_not_blinded(agent)
    ours = {k for k in agent.series if mine(k)}
    theirs = {k for k in kubelet.series if mine(k)}
    assert ours == theirs, (
        f"only the kubelet: {sorted(theirs - ours)}; only the agent: {sorted(ours - theirs)}"
    )
    for key in theirs:
        if "_swap_" in key[0]:
            assert {v for _, v in agent.series[key]} == {v for _, v in kubelet.series[key]}, key


def test_nothing_of_the_workload_is_missing(readings: tuple[Readings, Readings]) -> None:
    """Both list every container of the workload (3) and both pods."""
    agent, kubelet = readings
    check_not_blinded(agent)
    for readings_ in (agent, kubelet):
        containers = {
            k for k in readings_.series if k[0] == "container_cpu_usage_seconds_total" and mine(k)
        }
        pods = {k for k in readings_.series if k[0] == "pod_cpu_usage_seconds_total" and mine(k)}
        assert len(containers) == 3, containers
        assert len(pods) == 2, pods
