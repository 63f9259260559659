"""The Kubernetes backend: the KEP-1748 resource model of a live cluster.

Wires the I/O around `ResourceMetricsBackend`: one `Reflector` (list + watch) per watched
resource feeding `ClusterState` sinks, live API discovery for `{resource}` strings, the kubelet
scraper feeding a `UsageStore`, and optionally a Lease so that only one replica serves the
`/metrics/resources` series. Everything starts in `__aenter__` and stops in `__aexit__`.

Usage comes from the kubelets (`usage_source="kubelet"`) or from the node agents
(`"node-agent"`, see docs/node-agent.md): then one more Reflector follows the agent pods
(`node_agent_namespace`, `node_agent_selector`) into an `AgentDirectory`, and the same
scraper reads `https://<agent pod IP>:<node_agent_port>/metrics/resource` for every node
with an agent; parsing, storage and rates are the kubelet path's, unchanged.

Readiness: false until the first list of every watched resource has synced (usage may still
be warming up: pods without two usage samples simply have no usage value yet).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, Self

import httpx

from custom_metrics_server.compute.exposition import render_pod_resource_metrics
from custom_metrics_server.compute.metrics import (
    ResourceMetricsBackend,
    render_state_exposition,
)
from custom_metrics_server.compute.node_agents import AgentDirectory, agent_http_client
from custom_metrics_server.compute.records import NODES, WATCHED, ClusterState
from custom_metrics_server.compute.scraper import DEFAULT_CONCURRENCY, KubeletScraper
from custom_metrics_server.compute.scraper_metrics import ScraperCollector
from custom_metrics_server.compute.usage import UsageStore
from custom_metrics_server.domain import GroupResource, Readiness
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.discovery import DiscoveryRestMapper
from custom_metrics_server.kube.lease import LeaderElector
from custom_metrics_server.kube.watcher import Reflector
from custom_metrics_server.runtime.tasks import BackgroundTasks

logger = logging.getLogger(__name__)

_VERSIONS: Final = {"": "v1", "apps": "v1", "batch": "v1"}


def collection_path(group_resource: GroupResource) -> str:
    """The list/watch path of a watched resource (all namespaces)."""
    version = _VERSIONS[group_resource.group]
    if group_resource.group:
        return f"/apis/{group_resource.group}/{version}/{group_resource.resource}"
    return f"/api/{version}/{group_resource.resource}"


@dataclass(frozen=True, slots=True)
class KubernetesSettings:
    """How the backend reaches the cluster's data (flags of `serve`)."""

    kubelet_source: Literal["proxy", "direct"] = "proxy"
    kubelet_port: int = 10250
    kubelet_ca_file: str | None = None
    kubelet_insecure_tls: bool = False
    scrape_interval: float = 15.0
    scrape_timeout: float = 10.0
    scrape_concurrency: int = DEFAULT_CONCURRENCY
    discovery_interval: float = 600.0
    discovery_min_refresh: float = 5.0  # at most one on-miss refresh this often
    watch_page_size: int = 500
    leader_elect: bool = False
    lease_namespace: str = "custom-metrics"
    lease_name: str = "custom-metrics-server"
    identity: str = ""
    usage_source: Literal["kubelet", "node-agent"] = "kubelet"
    node_agent_namespace: str = "custom-metrics"
    node_agent_selector: str = "app.kubernetes.io/name=custom-metrics-node-agent"
    node_agent_port: int = 10443
    node_agent_ca_file: str | None = None
    node_agent_insecure_tls: bool = False


class KubernetesBackend(ResourceMetricsBackend):
    """Resource-model metrics of the cluster the client talks to."""

    def __init__(
        self,
        client: KubeClient,
        settings: KubernetesSettings | None = None,
        *,
        name: str = "kubernetes",
    ) -> None:
        self.settings = settings or KubernetesSettings()
        self.client = client
        self.discovery = DiscoveryRestMapper(
            client,
            interval=self.settings.discovery_interval,
            min_refresh_interval=self.settings.discovery_min_refresh,
        )
        state = ClusterState(resolver=self.discovery)
        self.usage_store = UsageStore()
        super().__init__(state, self.usage_store, name=name)
        self.reflectors = [
            Reflector(
                client,
                path=collection_path(gr),
                sink=state.sink(gr),
                name=str(gr),
                page_size=self.settings.watch_page_size,
            )
            for gr in WATCHED
        ]
        nodes_reflector = self.reflectors[WATCHED.index(NODES)]
        self.agents: AgentDirectory | None = None
        self._agent_client: httpx.AsyncClient | None = None
        watches = list(self.reflectors)
        source = self.settings.kubelet_source
        port = self.settings.kubelet_port
        target = "kubelet"

        def address(node: str) -> str | None:
            record = state.nodes.get(node)
            return (record.internal_ip or None) if record else None

        if self.settings.usage_source == "node-agent":
            self.agents = AgentDirectory()
            watches.append(
                Reflector(
                    client,
                    path=f"/api/v1/namespaces/{self.settings.node_agent_namespace}/pods",
                    sink=self.agents,
                    name="node-agents",
                    label_selector=self.settings.node_agent_selector,
                    page_size=self.settings.watch_page_size,
                )
            )
            self._agent_client = agent_http_client(
                ca_file=self.settings.node_agent_ca_file,
                insecure=self.settings.node_agent_insecure_tls,
                timeout=self.settings.scrape_timeout,
                max_connections=self.settings.scrape_concurrency,
            )
            source, port, target = "direct", self.settings.node_agent_port, "node agent"
            address = self.agents.address
        self.watches = watches  # the inventory's reflectors, and the agents' when used
        self.scraper = KubeletScraper(
            client,
            nodes=lambda: list(state.nodes),
            store=self.usage_store,
            interval=self.settings.scrape_interval,
            timeout=self.settings.scrape_timeout,
            concurrency=self.settings.scrape_concurrency,
            nodes_synced=nodes_reflector.wait_synced,
            source=source,
            kubelet_port=port,
            kubelet_ca_file=self.settings.kubelet_ca_file,
            kubelet_insecure_tls=self.settings.kubelet_insecure_tls,
            node_address=address,
            kubelet_client=self._agent_client,
            target=target,
        )
        self.elector: LeaderElector | None = None
        if self.settings.leader_elect:
            self.elector = LeaderElector(
                client,
                namespace=self.settings.lease_namespace,
                name=self.settings.lease_name,
                identity=self.settings.identity or socket.gethostname(),
            )
        self._stack = contextlib.AsyncExitStack()
        self._tasks = BackgroundTasks()

    def ready(self) -> Readiness:
        """Ready once every watched resource has listed; the reason names what is missing.
        Once ready, the scraper's note (no kubelet answered its first round) rides along for
        `/readyz?verbose` without failing it. O(watches), asked on every request."""
        waiting = [r for r in self.watches if not r.readiness().ready]
        if waiting:
            reasons = "; ".join(f"{r.name}: {r.readiness().reason}" for r in waiting)
            return Readiness(ready=False, reason=reasons)
        scraping = self.scraper.readiness()
        return Readiness(ready=True, reason=scraping.reason if scraping.ready else "")

    async def __aenter__(self) -> Self:
        for runner, name in [(self.discovery.run, "discovery")] + [
            (reflector.run, f"watch-{reflector.name}") for reflector in self.watches
        ]:
            self._tasks.start(runner(), name=name)
        await self._stack.enter_async_context(self.scraper)
        if self.elector is not None:
            await self._stack.enter_async_context(self.elector)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        await self._stack.aclose()
        if self._agent_client is not None:
            await self._agent_client.aclose()
        await self.client.aclose()

    def collector(self) -> ScraperCollector:
        """The scraper's self-metrics, for the server's `/metrics`."""
        return ScraperCollector(self.scraper)

    def serves_resource_series(self) -> bool:
        """Only the Lease holder serves `/metrics/resources` (when leader election is on)."""
        return self.elector is None or self.elector.is_leader

    def resource_exposition(self) -> bytes:
        """The KEP-1748 `/metrics/resources` text (empty on a standby replica)."""
        if not self.serves_resource_series():
            return render_pod_resource_metrics((), ())
        return render_state_exposition(self.state)
