"""`metrics.k8s.io` usage from prometheus-adapter's `resourceRules` (`kubectl top` through
Prometheus), for `--resource-metrics-source=prometheus`.

A background loop runs the four rule queries cluster-wide every `interval` (containers grouped
by namespace, pod and container label; nodes by node label) and swaps in two dictionaries, so
`pod_resource_usage()` and `node_resource_usage()` (the `ResourceUsageSource` the Resource
Metrics API reads) are lookups, never queries. prometheus-adapter instead queries per request,
with a pod-name regex, which is where its `kubectl top` timeouts came from (prometheus-adapter
issues #639, #610, #368).

As metrics-server does, a container appears only with both CPU and memory values; a pod's
timestamp is its earliest container's; `window` is `resourceRules.window`. CPU rates arrive as
float64 cores and are rounded to whole nanocores.

It sees the backend only as a :class:`RuleSource` (the configuration in force and a client
per server), so it does not import the backend that owns it.

Cost per refresh: four queries plus O(series returned); per lookup: O(1).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from decimal import Decimal
from typing import Protocol

from custom_metrics_server.errors import InternalError
from custom_metrics_server.prometheus import results
from custom_metrics_server.prometheus.answers import PrometheusError
from custom_metrics_server.prometheus.client import PrometheusClient
from custom_metrics_server.prometheus.queries import render
from custom_metrics_server.prometheus.rules import AdapterConfig, ResourceRule, ResourceRules
from custom_metrics_server.usage.values import ContainerResourceUsage, ResourceUsage

logger = logging.getLogger(__name__)

PodKey = tuple[str, str]


def _nanocores(cores: Decimal) -> int:
    # Rounded, not truncated: a float64 rate of 0.01 cores arrives as 0.009999999999999998.
    return int((cores * 1_000_000_000).to_integral_value())


class RuleSource(Protocol):
    """What the refresh needs of the Prometheus backend: the configuration in force (read at
    every refresh, so a reload takes effect) and the client of a configured server."""

    @property
    def config(self) -> AdapterConfig: ...

    def client(self, server: str) -> PrometheusClient: ...


class PrometheusResourceUsage:
    """Pod and node usage for the Resource Metrics API, from `resourceRules`."""

    def __init__(self, source: RuleSource, *, interval: float = 30.0) -> None:
        self.source = source
        self.interval = interval
        self._pods: dict[PodKey, ResourceUsage] = {}
        self._nodes: dict[str, ResourceUsage] = {}

    def pod_resource_usage(self, namespace: str, pod: str) -> ResourceUsage | None:
        """See `resource_api.ResourceUsageSource`."""
        return self._pods.get((namespace, pod))

    def node_resource_usage(self, node: str) -> ResourceUsage | None:
        """See `resource_api.ResourceUsageSource`."""
        return self._nodes.get(node)

    async def refresh(self) -> None:
        """Run the rules' queries once and swap in what they return."""
        rules = self.source.config.resource_rules
        if rules is None:
            self._pods, self._nodes = {}, {}
            return
        results = await asyncio.gather(
            self._containers(rules, rules.cpu),
            self._containers(rules, rules.memory),
            self._nodes_of(rules, rules.cpu),
            self._nodes_of(rules, rules.memory),
        )
        cpu, memory, node_cpu, node_memory = results
        window_ns = rules.window * 1_000_000_000
        pods: dict[PodKey, ResourceUsage] = {}
        for key, containers in cpu.items():
            rows = []
            stamp = None
            for name, (cores, at) in sorted(containers.items()):
                mem = memory.get(key, {}).get(name)
                if mem is None:
                    continue
                rows.append(ContainerResourceUsage(name, _nanocores(cores), int(mem[0])))
                stamp = at if stamp is None else min(stamp, at, mem[1])
            if rows and stamp is not None:
                pods[key] = ResourceUsage(
                    timestamp=stamp,
                    window_ns=window_ns,
                    containers=tuple(rows),
                    nanocores=sum(row.nanocores for row in rows),
                    memory_bytes=sum(row.memory_bytes for row in rows),
                )
        nodes: dict[str, ResourceUsage] = {}
        for name, (cores, at) in node_cpu.items():
            mem = node_memory.get(name)
            if mem is not None:
                nodes[name] = ResourceUsage(
                    timestamp=min(at, mem[1]),
                    window_ns=window_ns,
                    containers=(),
                    nanocores=_nanocores(cores),
                    memory_bytes=int(mem[0]),
                )
        self._pods, self._nodes = pods, nodes

    async def _containers(
        self, rules: ResourceRules, rule: ResourceRule
    ) -> dict[PodKey, dict[str, tuple[Decimal, float]]]:
        namespace, pod = rule.label_for("namespace"), rule.label_for("pod")
        if namespace is None or pod is None:
            logger.warning("resourceRules: no label maps to namespaces and pods")
            return {}
        query = render(
            rule.container_query,
            where="resourceRules",
            series="",
            matchers=[f'{namespace}!=""'],
            by_name={},
            group_by=[namespace, pod, rule.container_label],
            metric="containerQuery",
        )
        out: dict[PodKey, dict[str, tuple[Decimal, float]]] = {}
        for labels, value, stamp in await self._usage(rules, query):
            key = (labels.get(namespace, ""), labels.get(pod, ""))
            container = labels.get(rule.container_label, "")
            if all(key) and container:
                out.setdefault(key, {})[container] = (value, stamp)
        return out

    async def _nodes_of(
        self, rules: ResourceRules, rule: ResourceRule
    ) -> dict[str, tuple[Decimal, float]]:
        node = rule.label_for("node")
        if node is None:
            logger.warning("resourceRules: no label maps to nodes")
            return {}
        query = render(
            rule.node_query,
            where="resourceRules",
            series="",
            matchers=[f'{node}!=""'],
            by_name={},
            group_by=[node],
            metric="nodeQuery",
        )
        return {
            labels[node]: (value, stamp)
            for labels, value, stamp in await self._usage(rules, query)
            if labels.get(node)
        }

    async def _usage(
        self, rules: ResourceRules, query: str
    ) -> list[tuple[Mapping[str, str], Decimal, float]]:
        """The non-negative samples of a query's vector (usage cannot be negative)."""
        data = await self.source.client(rules.server).query(query)
        vector = results.vector_result(data) or []
        return [sample for sample in results.samples(vector) if sample[1] >= 0]

    async def run(self) -> None:
        """Refresh every `interval` until cancelled; failures keep the last values."""
        while True:
            try:
                await self.refresh()
            except (PrometheusError, InternalError) as err:
                logger.warning("resourceRules refresh failed, keeping the last values: %s", err)
            except Exception:
                logger.exception("resourceRules refresh failed")
            await asyncio.sleep(self.interval)
