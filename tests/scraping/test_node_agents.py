"""`--usage-source=node-agent` end to end: a fake API server lists two nodes, their pods and
one agent pod per node; two real `node-agent` processes (on 127.0.0.1 and 127.0.0.2, one
port, certificates from one CA) read two real gRPC CRI servers; the Kubernetes backend finds
the agents through their pods and serves `kube_running_pod_resource_usage` from them."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pydantic
import pytest
import trustme

from custom_metrics_server.backends.kubernetes.backend import (
    KubernetesBackend,
    KubernetesSettings,
    _NoticingSink,
)
from custom_metrics_server.cluster_state.records import NODES, ClusterState
from custom_metrics_server.cluster_state.wire_objects import NodeWire
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    PodStats,
    Summary,
)
from custom_metrics_server.plugins.builtin import KubernetesPluginSettings
from custom_metrics_server.scraping.node_agents import (
    AgentDirectory,
    check_address_template,
    template_address,
)
from custom_metrics_server.server.app import create_app
from tests.fakes.cri_runtime import FakeCriRuntime, world_from_summary
from tests.fakes.kube_apiserver import FakeKubeApiServer, node, pod
from tests.node_agent.test_agent_process import Agent, start_agent, stop_agent

pytestmark = pytest.mark.integration

P = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/shop/pods"
SELECTOR = "app.kubernetes.io/name=custom-metrics-node-agent"
# metrics-server's decode test ("Normal"): coredns' counter, working set, start and sample time.
CPU_1 = 4_710_169_000  # 4.710169 core-seconds
AT_1 = 1_633_253_812_125_000_000
STARTED = 1_633_252_712_000_000_000
MEMORY = 12_533_760
# The next sample, 15 s later: +1.5 core-seconds for `app`, +0.3 for `sidecar`.
AT_2 = AT_1 + 15_000_000_000


def _container(name: str, cpu: int, at: int) -> ContainerStats:
    return ContainerStats(name, STARTED, CpuStats(cpu, at), MemoryStats(MEMORY, at))


def node_summary(pods: dict[str, list[tuple[str, int]]], at: int) -> Summary:
    return Summary(
        None,
        tuple(
            PodStats(
                "shop",
                name,
                None,
                None,
                None,
                tuple(_container(c, cpu, at) for c, cpu in containers),
            )
            for name, containers in pods.items()
        ),
    )


def first_pods() -> dict[str, dict[str, list[tuple[str, int]]]]:
    return {
        "node-1": {"web-1": [("app", CPU_1)]},
        "node-2": {"web-2": [("app", CPU_1), ("sidecar", CPU_1)]},
    }


def second_pods() -> dict[str, dict[str, list[tuple[str, int]]]]:
    return {
        "node-1": {"web-1": [("app", CPU_1 + 1_500_000_000)]},
        "node-2": {"web-2": [("app", CPU_1 + 1_500_000_000), ("sidecar", CPU_1 + 300_000_000)]},
    }


def agent_pod(name: str, node_name: str, ip: str) -> dict[str, Any]:
    body = pod(
        "custom-metrics",
        name,
        labels={"app.kubernetes.io/name": "custom-metrics-node-agent"},
        node_name=node_name,
    )
    body["status"].update(
        {"podIP": ip, "hostIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}
    )
    return body


async def until(condition: Callable[[], Any], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def cluster(
    tmp_path: Path,
) -> AsyncIterator[tuple[FakeKubeApiServer, dict[str, FakeCriRuntime], str, int]]:
    ca = trustme.CA()
    serving = ca.issue_cert("127.0.0.1", "127.0.0.2")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert_file, key_file = tmp_path / "agent.crt", tmp_path / "agent.key"
    serving.cert_chain_pems[0].write_to_path(str(cert_file))
    serving.private_key_pem.write_to_path(str(key_file))
    port = free_port()
    runtimes: dict[str, FakeCriRuntime] = {}
    agents: list[Agent] = []
    with FakeKubeApiServer() as api:
        for name in ("shop", "custom-metrics"):
            api.add("namespaces", {"metadata": {"name": name}})
        for number, ip in ((1, "127.0.0.1"), (2, "127.0.0.2")):
            node_name = f"node-{number}"
            api.add("nodes", node(node_name))
            api.add("pods", agent_pod(f"agent-{number}", node_name, ip))
            work = tmp_path / node_name
            work.mkdir()
            socket_dir = Path("/tmp") / f"cri-{port}-{number}"
            socket_dir.mkdir(exist_ok=True)
            runtime = FakeCriRuntime(socket_dir / "cri.sock")
            await runtime.start()
            runtimes[node_name] = runtime
            agents.append(
                await asyncio.to_thread(
                    start_agent,
                    work,
                    "--cri-endpoint",
                    runtime.endpoint,
                    "--bind-address",
                    ip,
                    "--secure-port",
                    str(port),
                    "--tls-cert-file",
                    str(cert_file),
                    "--tls-private-key-file",
                    str(key_file),
                    "--stats-cache-duration",
                    "0",
                )
            )
        api.add("pods", pod("shop", "web-1", node_name="node-1"))
        web_2 = pod("shop", "web-2", node_name="node-2")
        web_2["spec"]["containers"] = [{"name": "app"}, {"name": "sidecar"}]
        api.add("pods", web_2)
        # A pod of the agent's label elsewhere is not an agent.
        api.add(
            "pods",
            agent_pod("stray", "node-1", "10.9.9.9")
            | {
                "metadata": {
                    "name": "stray",
                    "namespace": "shop",
                    "labels": {"app.kubernetes.io/name": "custom-metrics-node-agent"},
                }
            },
        )
        try:
            yield api, runtimes, str(ca_file), port
        finally:
            for agent in agents:
                stop_agent(agent)
            for runtime in runtimes.values():
                await runtime.stop()
                runtime.socket_path.parent.rmdir()


async def test_backend_serves_usage_from_two_agents(
    cluster: tuple[FakeKubeApiServer, dict[str, FakeCriRuntime], str, int],
) -> None:
    api, runtimes, ca_file, port = cluster
    for node_name, pods in first_pods().items():
        runtimes[node_name].world = world_from_summary(node_summary(pods, AT_1))
    settings = KubernetesSettings(
        scrape_interval=0.3,
        scrape_timeout=3.0,
        discovery_interval=60,
        discovery_min_refresh=0,
        usage_source="node-agent",
        node_agent_namespace="custom-metrics",
        node_agent_selector=SELECTOR,
        node_agent_port=port,
        node_agent_ca_file=ca_file,
    )
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        await until(lambda: backend.ready().ready)
        assert backend.agents is not None
        assert backend.agents.nodes() == {"node-1": "127.0.0.1", "node-2": "127.0.0.2"}
        await until(lambda: set(backend.usage_store.nodes()) == {"node-1", "node-2"})
        assert backend.usage_store.pod_usage("shop", "web-1") is None  # one sample so far
        # Memory needs one sample: served now; CPU (a rate) and the PodMetrics (cpu and
        # memory together, as metrics-server: `kubectl top` prints both) wait for a second.
        app = create_app(cluster=backend.state, backends=[backend])
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://t"
        ) as client:
            early_memory = await client.get(
                P + "/web-2/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dmemory"
            )
            early_cpu = await client.get(
                P + "/web-2/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
            )
            early_both = await client.get(P + "/web-2/kube_running_pod_resource_usage")
            early_pod_metrics = await client.get(
                "/apis/metrics.k8s.io/v1beta1/namespaces/shop/pods/web-2"
            )
        assert early_memory.status_code == 200, early_memory.text
        [early] = early_memory.json()["items"]
        assert early["value"] == str(2 * MEMORY)
        assert early["timestamp"] == "2021-10-03T09:36:52Z"  # the sample's own time (AT_1)
        assert "windowSeconds" not in early or early["windowSeconds"] is None
        assert early_cpu.status_code == 404
        assert early_cpu.json()["reason"] == "NotFound"
        [both] = early_both.json()["items"]  # the sum of what is known: memory alone
        assert both["value"] == str(2 * MEMORY), both
        assert early_pod_metrics.status_code == 404
        for node_name, pods in second_pods().items():
            runtimes[node_name].world = world_from_summary(node_summary(pods, AT_2))
        await until(lambda: backend.usage_store.pod_usage("shop", "web-2") is not None)
        await until(lambda: backend.usage_store.pod_usage("shop", "web-1") is not None)
        assert backend.usage_store.node_usage("node-1") is not None  # host totals, rated

        app = create_app(cluster=backend.state, backends=[backend])
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="https://t"
        ) as client:
            response = await client.get(
                P + "/*/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
            )
            items = {i["describedObject"]["name"]: i for i in response.json()["items"]}
            memory = await client.get(
                P + "/web-2/kube_running_pod_resource_usage?metricLabelSelector=resource%3Dmemory"
            )
    # (counter at AT_2 - counter at AT_1) / 15 s, summed over each pod's containers
    assert items["web-1"]["value"] == "100m"
    assert items["web-2"]["value"] == "120m"
    assert items["web-1"]["windowSeconds"] == 15
    assert items["web-1"]["timestamp"] == "2021-10-03T09:37:07Z"
    assert memory.json()["items"][0]["value"] == str(2 * MEMORY)


def test_directory_follows_agent_pods() -> None:
    directory = AgentDirectory()
    directory.list_started()
    directory.listed(agent_pod("a", "n1", "10.0.0.1"))
    old = agent_pod("b", "n1", "10.0.0.2")
    old["status"]["conditions"] = []
    directory.listed(old)
    pending = agent_pod("c", "n2", "10.0.0.3")
    pending["status"]["phase"] = "Pending"
    directory.listed(pending)
    directory.list_finished()
    assert directory.nodes() == {"n1": "10.0.0.1"}  # the ready one of two; pending none
    directory.event("DELETED", agent_pod("a", "n1", "10.0.0.1"))
    assert directory.address("n1") == "10.0.0.2"
    pending["status"]["phase"] = "Running"
    directory.event("MODIFIED", pending)
    directory.list_started()
    directory.listed(pending)
    directory.list_finished()
    assert directory.nodes() == {"n2": "10.0.0.3"}


async def test_a_node_whose_agent_turns_up_is_scraped_at_once(
    cluster: tuple[FakeKubeApiServer, dict[str, FakeCriRuntime], str, int],
) -> None:
    """node-1's agent pod is not there at start (its scrapes fail: no address, and back off);
    when the watch reports the agent pod, node-1 is scraped at once, not after its backoff
    or the next round (an hour away here)."""
    api, runtimes, ca_file, port = cluster
    for node_name, pods in first_pods().items():
        runtimes[node_name].world = world_from_summary(node_summary(pods, AT_1))
    agent_1 = api.delete("pods", "agent-1", namespace="custom-metrics")
    assert agent_1 is not None
    settings = KubernetesSettings(
        scrape_interval=3600,
        scrape_timeout=3.0,
        discovery_interval=60,
        discovery_min_refresh=0,
        usage_source="node-agent",
        node_agent_namespace="custom-metrics",
        node_agent_selector=SELECTOR,
        node_agent_port=port,
        node_agent_ca_file=ca_file,
    )
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        await until(lambda: set(backend.usage_store.nodes()) == {"node-2"}, within=60)
        await until(lambda: backend.scraper.nodes.is_failing("node-1"), within=60)
        assert backend.scraper.nodes.failing()["node-1"][0] == "no_address"
        pending = agent_pod("agent-1", "node-1", "127.0.0.1")
        pending["status"]["conditions"] = []
        pending["metadata"].pop("resourceVersion", None)
        api.add("pods", pending)  # running, not ready yet: its address is known
        await until(lambda: "node-1" in backend.usage_store.nodes(), within=60)
        assert backend.scraper.stats().rounds_started == 1


def test_directory_says_when_a_node_s_agent_changes() -> None:
    changed: list[str] = []
    directory = AgentDirectory(on_change=changed.append)
    unready = agent_pod("a", "n1", "10.0.0.1")
    unready["status"]["conditions"] = []
    directory.event("ADDED", unready)  # appears (not ready yet): scrape it now
    directory.event("MODIFIED", unready)  # nothing changed
    directory.event("MODIFIED", agent_pod("a", "n1", "10.0.0.1"))  # turned ready
    directory.event("ADDED", agent_pod("b", "n1", "10.0.0.2"))  # a second one: "a" stays
    directory.event("DELETED", agent_pod("a", "n1", "10.0.0.1"))  # gone: nothing to scrape
    directory.event("MODIFIED", agent_pod("b", "n1", "10.0.0.3"))  # moved
    assert changed == ["n1", "n1", "n1"]


@pytest.mark.parametrize("wire", [False, True], ids=["dict", "NodeWire"])
def test_node_sink_reports_nodes_that_turn_ready(wire: bool) -> None:
    noticed: list[list[str]] = []
    inner = ClusterState().sink(NODES)
    sink = _NoticingSink(inner, lambda names: noticed.append(list(names)))

    def ready(name: str, status: str) -> Any:
        body = node(name)
        body["status"]["conditions"] = [{"type": "Ready", "status": status}]
        # The node watch decodes with the NodeWire schema; tests may feed documents.
        return msgspec.json.decode(json.dumps(body), type=NodeWire) if wire else body

    sink.list_started()
    sink.listed(ready("n1", "False"))
    sink.listed(ready("n2", "True"))
    sink.list_finished()
    sink.event("MODIFIED", ready("n2", "True"))  # no change: nothing said
    sink.event("MODIFIED", ready("n1", "True"))  # back: scrape it now
    sink.event("ADDED", ready("n3", "True"))  # new: a catch-up for never-scraped nodes
    assert noticed == [[], ["n1"], []]


async def test_host_agents_are_found_by_address_template_not_pods(
    cluster: tuple[FakeKubeApiServer, dict[str, FakeCriRuntime], str, int],
) -> None:
    """`--node-agent-address='{internal_ip}'`: agents that run on the hosts (no pods); each
    node's agent is at its InternalIP."""
    api, runtimes, ca_file, port = cluster
    for node_name, pods in first_pods().items():
        runtimes[node_name].world = world_from_summary(node_summary(pods, AT_1))
    for number in (1, 2):
        api.delete("pods", f"agent-{number}", namespace="custom-metrics")
        body = node(f"node-{number}")
        body["status"]["addresses"] = [{"type": "InternalIP", "address": f"127.0.0.{number}"}]
        api.update("nodes", body)
    settings = KubernetesSettings(
        scrape_interval=0.3,
        scrape_timeout=3.0,
        discovery_interval=60,
        discovery_min_refresh=0,
        usage_source="node-agent",
        node_agent_port=port,
        node_agent_ca_file=ca_file,
        node_agent_address="{internal_ip}",
    )
    backend = KubernetesBackend(KubeClient(api.connection()), settings)
    async with backend:
        assert backend.agents is None
        assert [r.name for r in backend.watches if r.name == "node-agents"] == []
        await until(lambda: set(backend.usage_store.nodes()) == {"node-1", "node-2"}, within=60)
    assert api.count("list", "/api/v1/namespaces/custom-metrics/pods") == 0


@pytest.mark.parametrize(
    ("template", "node", "ip", "address"),
    [
        ("{internal_ip}", "n1", "10.0.0.1", "10.0.0.1"),
        ("{internal_ip}", "n1", None, None),
        ("{node}.agents.example", "n1", None, "n1.agents.example"),
        ("10.244.0.1", "n1", None, "10.244.0.1"),
        ("fd00::1", "n1", None, "fd00::1"),
    ],
)
def test_address_templates(template: str, node: str, ip: str | None, address: str | None) -> None:
    assert template_address(check_address_template(template), lambda _: ip)(node) == address


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("", "empty"),
        ("{nodename}", "only {node} and {internal_ip} are known"),
        ("https://{internal_ip}", "not a host name or IP address"),
        ("{internal_ip}:10443", "not a host name or IP address"),
        ("[fd00::1]", "not a host name or IP address"),
        ("{", "not a node agent address template"),
    ],
)
def test_bad_address_templates_say_why(template: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_address_template(template)
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        KubernetesPluginSettings.model_validate({"nodeAgentAddress": template})
