"""The Kubernetes backend: the KEP-1748 resource model of a live cluster.

Wires the I/O around `ResourceMetricsBackend`: one `Reflector` (list + watch) per watched
resource feeding `ClusterState` sinks, live API discovery for `{resource}` strings, the kubelet
scraper feeding a `UsageStore`, and optionally a Lease so that only one replica serves the
`/metrics/resources` series. Everything starts in `__aenter__` and stops in `__aexit__`.

Usage comes from the kubelets (`usage_source="kubelet"`) or from the node agents
(`"node-agent"`, see docs/node-agent.md): then one more Reflector follows the agent pods
(`node_agent_namespace`, `node_agent_selector`) into an `AgentDirectory`, and the same
scraper reads `https://<agent pod IP>:<node_agent_port>/metrics/resource` for every node
with an agent; with `node_agent_address` (agents run on the hosts, not as pods) no pods are
watched and each node's agent is at that template's address (`{node}`, `{internal_ip}`);
parsing, storage and rates are the kubelet path's, unchanged.

Start-up (`__aenter__`) first asks for one object of every watched collection (`limit=1`),
so that a kubeconfig the API server refuses, an API server that cannot be reached (after
`kube.startup`'s retries) or a ClusterRole that does not grant `list` fails start-up with one
line naming the call and the fix, instead of readiness that never comes; with
`--leader-elect`, the first Lease round runs there too (`LeaderElector.first_round`).

Readiness: false until the first list of every watched resource has synced. Usage never
fails readiness; until the kubelets have answered (the first round starts as soon as every
watched list has synced, i.e. when the backend turns ready, and nodes that join later are
scraped at once), the scraper's note says so under `/readyz?verbose`
(`[+]backend-kubernetes ok (usage not available yet: ...)`). Not at the node list's sync:
on a large cluster the first round would then compete with the pods' initial list for the
CPU (docs/performance.md, "Memos of the Kubernetes backend").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Literal, Self

from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend
from custom_metrics_server.backends.kubernetes.state_exposition import (
    render_state_exposition,
    stream_state_exposition,
)
from custom_metrics_server.cluster_state.records import NODES, PODS, WATCHED, ClusterState
from custom_metrics_server.cluster_state.wire_objects import (
    NodeWire,
    ObjectWire,
    PodWire,
    WireCodec,
)
from custom_metrics_server.domain import GroupResource, Readiness
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.discovery import DiscoveryRestMapper
from custom_metrics_server.kube.lease import LeaderElector, shared_elector
from custom_metrics_server.kube.startup import startup_call
from custom_metrics_server.kube.watcher import Reflector, WatchSink
from custom_metrics_server.resources.exposition import render_pod_resource_metrics
from custom_metrics_server.runtime.tasks import BackgroundTasks
from custom_metrics_server.scraping.kubelet_scraper import DEFAULT_CONCURRENCY, KubeletScraper
from custom_metrics_server.scraping.node_agents import (
    AgentDirectory,
    agent_tls,
    template_address,
)
from custom_metrics_server.scraping.scraper_metrics import ScraperCollector
from custom_metrics_server.usage.store import UsageStore

logger = logging.getLogger(__name__)

_VERSIONS: Final = {"": "v1", "apps": "v1", "batch": "v1"}
#: What to bind when a watched collection may not be listed.
LIST_FORBIDDEN_FIX: Final = (
    "the service account needs get, list and watch on {resource}: the ClusterRole "
    "custom-metrics-server (manifests/base/cluster-role.yaml) and its ClusterRoleBinding "
    "(cluster-role-binding.yaml)"
)


def _node_name_ready(obj: Any) -> tuple[str, bool]:
    """A node's name and whether its Ready condition is True, from a `NodeWire` (what the
    node watch decodes) or a plain document. O(conditions)."""
    if isinstance(obj, dict):
        name = (obj.get("metadata") or {}).get("name") or ""
        conditions = [
            (c.get("type"), c.get("status"))
            for c in (obj.get("status") or {}).get("conditions") or ()
        ]
    else:
        metadata, status = obj.metadata, obj.status
        name = (metadata.name if metadata is not None else None) or ""
        found = (status.conditions if status is not None else None) or ()
        conditions = [(c.type, c.status) for c in found]
    return str(name), ("Ready", "True") in conditions


class _NoticingSink:
    """A node sink that also tells the scraper when nodes may have joined (ADDED events and
    every relist): new nodes are scraped at once instead of at the next round; and which
    nodes turned Ready (a kubelet back after a restart): scraped at once too instead of
    after their backoff. Keeps one bool per node."""

    def __init__(self, inner: WatchSink, notice: Callable[[Iterable[str]], None]) -> None:
        self._inner = inner
        self._notice = notice
        self._ready: dict[str, bool] = {}
        self._turned_ready: list[str] = []

    def _track(self, obj: Any) -> None:
        name, ready = _node_name_ready(obj)
        if ready and self._ready.get(name) is False:
            self._turned_ready.append(name)
        self._ready[name] = ready

    def list_started(self) -> None:
        self._inner.list_started()

    def listed(self, obj: dict[str, Any]) -> None:
        self._inner.listed(obj)
        self._track(obj)

    def list_finished(self) -> None:
        self._inner.list_finished()
        self._flush()

    def event(self, type: str, obj: dict[str, Any]) -> None:
        self._inner.event(type, obj)
        if type == "DELETED":
            self._ready.pop(_node_name_ready(obj)[0], None)
            return
        self._track(obj)
        if type == "ADDED" or self._turned_ready:
            self._flush()

    def _flush(self) -> None:
        turned, self._turned_ready = self._turned_ready, []
        self._notice(turned)


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
    #: host agents: each node's agent address from this template (`node_agents`), no pods
    node_agent_address: str | None = None
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
        # The fresh-container rule (usage after one scrape) uses the configured resolution,
        # as metrics-server's --metric-resolution.
        self.usage_store = UsageStore(
            metric_resolution=self.settings.scrape_interval, pod_key=state.pod_key
        )
        super().__init__(state, self.usage_store, name=name)
        self.reflectors = [
            Reflector(
                client,
                path=collection_path(gr),
                sink=_NoticingSink(state.sink(gr), self._notice_nodes)
                if gr == NODES
                else state.sink(gr),
                name=str(gr),
                page_size=self.settings.watch_page_size,
                # Schema decoders: only the fields the records read are built.
                codec=WireCodec(PodWire if gr == PODS else NodeWire if gr == NODES else ObjectWire),
            )
            for gr in WATCHED
        ]
        self.agents: AgentDirectory | None = None
        watches = list(self.reflectors)
        source = self.settings.kubelet_source
        port = self.settings.kubelet_port
        target = "kubelet"
        # Node agents' TLS, and no credentials sent to them (None: kubelets, the cluster's).
        agent_context: ssl.SSLContext | None = None

        def internal_ip(node: str) -> str | None:
            record = state.nodes.get(node)
            return (record.internal_ip or None) if record else None

        address: Callable[[str], str | None] = internal_ip

        if self.settings.usage_source == "node-agent":
            template = self.settings.node_agent_address
            if template is None:
                self.agents = AgentDirectory(on_change=self._agent_changed)
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
            agent_context = agent_tls(
                ca_file=self.settings.node_agent_ca_file,
                insecure=self.settings.node_agent_insecure_tls,
            )
            source, port, target = "direct", self.settings.node_agent_port, "node agent"
            if self.agents is not None:
                address = self.agents.address
            else:  # agents on the hosts: the node's InternalIP or a fixed name
                address = template_address(template or "", internal_ip)
        self.watches = watches  # the inventory's reflectors, and the agents' when used
        self.scraper = KubeletScraper(
            client,
            nodes=lambda: list(state.nodes),
            store=self.usage_store,
            interval=self.settings.scrape_interval,
            timeout=self.settings.scrape_timeout,
            concurrency=self.settings.scrape_concurrency,
            nodes_synced=self._listed,
            source=source,
            kubelet_port=port,
            kubelet_ca_file=self.settings.kubelet_ca_file,
            kubelet_insecure_tls=self.settings.kubelet_insecure_tls,
            node_address=address,
            agent_tls=agent_context,
            target=target,
        )
        self.elector: LeaderElector | None = None
        if self.settings.leader_elect:
            self.elector = shared_elector(
                client.connection,
                namespace=self.settings.lease_namespace,
                name=self.settings.lease_name,
                identity=self.settings.identity or socket.gethostname(),
            )
        self._stack = contextlib.AsyncExitStack()
        self._tasks = BackgroundTasks()

    async def _listed(self) -> None:
        """Return once every watched collection (the agents' too) has listed once: the
        first scrape round waits for the whole cluster view, not only the node list."""
        for reflector in self.watches:
            await reflector.wait_synced()

    def _notice_nodes(self, turned_ready: Iterable[str] = ()) -> None:
        self.scraper.notice_nodes(turned_ready)

    def _agent_changed(self, node: str) -> None:
        """A node's agent appeared, turned ready or moved: scrape the node at once."""
        self.scraper.notice_nodes((node,))

    def ready(self) -> Readiness:
        """Ready once every watched resource has listed; the reason names what is missing.
        Once ready, the scraper's note (usage not available yet, partly available, or no
        kubelet answered) rides along for `/readyz?verbose` without failing it.
        O(watches), asked on every request."""
        waiting = [r for r in self.watches if not r.readiness().ready]
        if waiting:
            reasons = "; ".join(f"{r.name}: {r.readiness().reason}" for r in waiting)
            return Readiness(ready=False, reason=reasons)
        return Readiness(ready=True, reason=self.scraper.readiness().reason)

    async def check_access(self) -> None:
        """One `limit=1` list of every watched collection, at once; the first that fails for
        good raises `StartupError` (see the module docstring). O(watches) requests."""

        async def first_page(reflector: Reflector) -> None:
            params = {**reflector.selectors, "limit": "1"}
            await startup_call(
                lambda: self.client.get_json(reflector.path, params),
                what=f"cannot list {reflector.name}",
                connection=self.client.connection,
                fixes={403: LIST_FORBIDDEN_FIX.format(resource=reflector.name)},
            )

        results = await asyncio.gather(
            *(first_page(r) for r in self.watches), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def __aenter__(self) -> Self:
        try:
            await self.check_access()
            if self.elector is not None:  # its first round may fail start-up: before the rest
                await self._stack.enter_async_context(self.elector)
            for runner, name in [(self.discovery.run, "discovery")] + [
                (reflector.run, f"watch-{reflector.name}") for reflector in self.watches
            ]:
                self._tasks.start(runner(), name=name)
            await self._stack.enter_async_context(self.scraper)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()
        await self._stack.aclose()
        await self.client.aclose()

    def collector(self) -> ScraperCollector:
        """The scraper's self-metrics, for the server's `/metrics`."""
        return ScraperCollector(self.scraper)

    def serves_resource_series(self) -> bool:
        """Only the Lease holder serves `/metrics/resources` (when leader election is on)."""
        return self.elector is None or self.elector.is_leader

    def resource_exposition(self) -> bytes:
        """The KEP-1748 `/metrics/resources` text (empty on a standby replica), in one piece."""
        if not self.serves_resource_series():
            return render_pod_resource_metrics((), ())
        return render_state_exposition(self.state)

    def resource_exposition_chunks(self) -> Iterator[bytes]:
        """The same bytes as `resource_exposition`, streamed (`stream_state_exposition`):
        what the server sends. Leadership is decided when the scrape starts; a standby
        replica streams an empty body."""
        if not self.serves_resource_series():
            return iter(())
        return stream_state_exposition(self.state)
