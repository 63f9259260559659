"""The agent's collection path against a real gRPC CRI server: the kubelet samples again,
now with every container and pod value travelling through the runtime's RPCs."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from custom_metrics_server.kubelet_format.summary import NodeStats, Summary
from custom_metrics_server.kubelet_format.writer import render_resource_metrics
from custom_metrics_server.node_agent.collector import Collector
from custom_metrics_server.node_agent.runtime import RuntimeClient
from custom_metrics_server.scraping.failure import ScrapeFailure
from tests.fakes.cri_runtime import FakeCriRuntime, world_from_summary
from tests.node_agent.samples import CASES, families, go_order, sample_path

#: kubelets before 1.30 wrote it beside resource_scrape_error; the agent writes 1.36's body
LEGACY = frozenset({"scrape_error"})


class FixedNode:
    def __init__(self, node: NodeStats) -> None:
        self.node = node

    def read(self) -> NodeStats:
        return self.node


#: case -> (Windows sandboxes?, families compared apart, and why)
_KIND = {
    # container_a has committed memory (Windows only) *and* swap (Linux only): no single
    # runtime reports both, so a Linux runtime has no commit family; and the kubelet on a CRI
    # runtime sums container swap into pod swap (see the next test), which the sample lacks.
    "05_arbitrary_container_metrics_for_different_container_pods_and_namespaces": (
        False,
        frozenset({"container_memory_commit_bytes", "pod_swap_usage_bytes"}),
    ),
    "06_arbitrary_container_metrics_for_negative_starttime": (True, frozenset()),
    # The CRI has no pod-level swap (the kubelet sums containers'); this pod has none.
    "08_arbitrary_pod_metrics": (False, frozenset({"pod_swap_usage_bytes"})),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_samples_through_the_cri(runtime: FakeCriRuntime, case: str) -> None:
    summary = CASES[case]
    windows, missing = _KIND.get(case, (False, frozenset()))
    if summary is None:
        runtime.fail_with = grpc.StatusCode.UNAVAILABLE
        node = None
    else:
        runtime.world = world_from_summary(summary, windows=windows, exited=1, not_ready=2)
        node = summary.node
    async with RuntimeClient(runtime.endpoint, timeout=2) as client:
        collector = Collector(client.pods, node and FixedNode(node), max_age=0)
        body = await collector.body()
    sample = sample_path(case).read_text()
    # The samples are the upstream collector test's, which still has the legacy `scrape_error`
    # family; the agent writes kubelet 1.36's body, without it.
    assert "scrape_error" not in families(body.decode())
    missing = missing | LEGACY
    assert go_order(body.decode(), without=missing) == go_order(sample, without=missing)
    if summary is not None:
        assert runtime.calls.count("ListPodSandboxStats") == 1
    if case.startswith("05"):
        assert families(body.decode())["pod_swap_usage_bytes"].splitlines()[2:] == [
            'pod_swap_usage_bytes{namespace="namespace_a",pod="pod_a"} 1000 1624396278302'
        ]


async def test_runtime_without_sandbox_stats_sums_containers(runtime: FakeCriRuntime) -> None:
    case = "05_arbitrary_container_metrics_for_different_container_pods_and_namespaces"
    summary = CASES[case]
    assert summary is not None
    runtime.world = world_from_summary(summary, exited=1, not_ready=1)
    runtime.sandbox_stats_unimplemented = True
    async with RuntimeClient(runtime.endpoint) as client:
        first = await client.pods()
        second = await client.pods()
    assert first == second
    assert runtime.calls.count("ListPodSandboxStats") == 1  # remembered
    assert runtime.calls.count("ListContainerStats") == 2
    body = families(render_resource_metrics(Summary(None, first)).decode())
    sample = families(sample_path(case).read_text())
    for name in ("container_cpu_usage_seconds_total", "container_start_time_seconds"):
        assert body[name] == sample[name]
    assert body["pod_cpu_usage_seconds_total"].splitlines()[2:] == [
        'pod_cpu_usage_seconds_total{namespace="namespace_a",pod="pod_a"} 20 1624396278302',
        'pod_cpu_usage_seconds_total{namespace="namespace_b",pod="pod_b"} 10 1624396278302',
    ]


@pytest.mark.parametrize(
    ("name", "version", "racy"),
    [
        ("containerd", "1.6.20~ds1", True),  # Debian 12
        ("containerd", "v1.6.21", True),
        ("containerd", "v1.6.22", False),  # containerd#8819, the fix's backport
        ("containerd", "1.7.24", False),
        ("containerd", "2.0.0", False),
        ("cri-o", "1.6.0", False),
        ("containerd", "unknown", False),
    ],
)
async def test_containerd_releases_that_the_sandbox_stats_call_crashes_get_container_stats(
    runtime: FakeCriRuntime, name: str, version: str, racy: bool
) -> None:
    """containerd 1.6.0-1.6.21 can die of ``ListPodSandboxStats`` meeting the kubelet's own
    sandbox listing (containerd#8130, seen on a real node): the agent never calls it there,
    not even in its first collection, and the pods are the same, summed over containers."""
    case = "07_nil_container_metrics"
    summary = CASES[case]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    runtime.runtime = (name, version)
    async with RuntimeClient(runtime.endpoint) as client:
        pods = await client.pods()
        await client.pods()
    assert runtime.calls[0] == "Version"  # asked before the first stats call
    assert ("ListPodSandboxStats" in runtime.calls) is not racy
    assert runtime.calls.count("ListContainerStats") == (2 if racy else 0)
    assert {(pod.namespace, pod.name) for pod in pods} == {
        (pod.namespace, pod.name) for pod in summary.pods
    }


def reachable(client: RuntimeClient) -> bool:
    """Whether the client's last call succeeded (False before any call)."""
    return client.calls > 0 and client.last_error is None


async def test_version_and_deadline(runtime: FakeCriRuntime) -> None:
    async with RuntimeClient(runtime.endpoint, timeout=0.3) as client:
        version = await client.version()
        assert (version.runtime_name, version.runtime_api_version) == ("fake-cri", "v1")
        assert reachable(client)
        runtime.delay = 30.0
        started = time.monotonic()
        with pytest.raises(ScrapeFailure) as failure:
            await client.pods()
        assert failure.value.reason == "deadline"
        # The 0.3 s deadline, not the runtime's 30 s answer (a third of it, for a loaded machine).
        assert time.monotonic() - started < 10
        assert not reachable(client)


async def test_reconnects_after_the_runtime_restarts(runtime: FakeCriRuntime) -> None:
    summary = CASES["07_nil_container_metrics"]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    async with RuntimeClient(runtime.endpoint, timeout=1, max_backoff=0.5) as client:
        collector = Collector(client.pods, None, max_age=0)
        good = await collector.body()
        assert b"container_cpu_usage_seconds_total{" in good
        await runtime.stop()
        down = await collector.body()
        assert down == go_order(sample_path("01_error_getting_summary").read_text(), without=LEGACY)
        assert collector.runtime_up._value.get() == 0
        await runtime.start()
        deadline = time.monotonic() + 10
        while (body := await collector.body()) != good:
            assert time.monotonic() < deadline, body
            await asyncio.sleep(0.1)
        assert collector.runtime_up._value.get() == 1


async def test_concurrent_scrapes_share_one_collection(runtime: FakeCriRuntime) -> None:
    async with RuntimeClient(runtime.endpoint) as client:
        collector = Collector(client.pods, None, max_age=60)
        runtime.delay = 0.1
        bodies = await asyncio.gather(*(collector.body() for _ in range(20)))
        await collector.body()  # cached
    assert len(set(bodies)) == 1
    assert runtime.calls.count("ListPodSandbox") == 1


def test_endpoint_forms() -> None:
    assert RuntimeClient("/run/crio/crio.sock").endpoint == "/run/crio/crio.sock"
    with pytest.raises(ValueError, match="unsupported CRI endpoint"):
        RuntimeClient("tcp://127.0.0.1:1234")


async def test_a_deleted_pod_costs_only_its_own_figures(
    runtime: FakeCriRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    """containerd 1.6 fails the unfiltered ListPodSandboxStats while a deleted pod's sandbox
    (NOTREADY, cgroup gone) is listed: the agent asks each ready sandbox on its own."""
    case = "05_arbitrary_container_metrics_for_different_container_pods_and_namespaces"
    summary = CASES[case]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    async with RuntimeClient(runtime.endpoint) as client:
        collector = Collector(client.pods, None, max_age=0)
        before = families((await collector.body()).decode())
        assert runtime.filtered_calls == []
        runtime.delete_pod("sandbox-1")  # namespace_b/pod_b
        with caplog.at_level("INFO", logger="custom_metrics_server.node_agent.runtime"):
            during = families((await collector.body()).decode())
            again = families((await collector.body()).decode())
            assert during == again
            assert await collector.usable() is None  # figures to serve: ready
            runtime.remove_pod("sandbox-1")  # the kubelet garbage-collected it
            after = families((await collector.body()).decode())
    # ready ones only, in each of the three collections while the list failed
    assert runtime.filtered_calls == ["sandbox-0"] * 3
    assert during["resource_scrape_error"].endswith("resource_scrape_error 0\n")
    for name, block in before.items():
        if name == "resource_scrape_error":
            continue
        kept = [line for line in block.splitlines() if 'pod="pod_b"' not in line]
        assert during.get(name, "").splitlines() == (kept if len(kept) > 2 else [])
    assert after == during
    messages = [r.getMessage() for r in caplog.records]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, messages
    assert (
        "answered ListPodSandboxStats with an error (UNKNOWN: failed to obtain metrics"
        in warnings[0]
    )
    assert "cgroups: cgroup deleted" in warnings[0]
    assert "does not answer" not in " ".join(messages)
    assert any("answers ListPodSandboxStats again" in m for m in messages)
    assert client.sandboxes_skipped == 0  # pod_b was not ready: not asked at all


async def test_a_sandbox_whose_own_call_fails_is_left_out(runtime: FakeCriRuntime) -> None:
    case = "05_arbitrary_container_metrics_for_different_container_pods_and_namespaces"
    summary = CASES[case]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    # A ready sandbox whose cgroup went (a race with the kubelet's stop): only it goes.
    runtime.cgroup_deleted.add("sandbox-0")
    async with RuntimeClient(runtime.endpoint) as client:
        pods = await client.pods()
    assert [(p.namespace, p.name) for p in pods] == [("namespace_b", "pod_b")]


async def test_an_error_answer_reads_as_one_and_health_follows_it(
    runtime: FakeCriRuntime, caplog: pytest.LogCaptureFixture
) -> None:
    summary = CASES["07_nil_container_metrics"]
    assert summary is not None
    runtime.world = world_from_summary(summary)
    async with RuntimeClient(runtime.endpoint) as client:
        collector = Collector(client.pods, None, max_age=0)
        assert await collector.usable() is None
        runtime.fail_with = grpc.StatusCode.INTERNAL
        with caplog.at_level("WARNING"):
            failure = await collector.usable()
        assert failure is not None
        assert failure.reason == "internal"
        assert "INTERNAL" in failure.message
        assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
            f"the container runtime answered with an error: {failure.message}"
        ]
        runtime.fail_with = None
        assert await collector.usable() is None
