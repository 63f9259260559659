"""The `prometheus` source: a PromQL query confined to the definition's namespace, sent to a
Prometheus server the platform configured (docs/metric-definitions.md, "Source `prometheus`").

The maker refuses before anything is sent: a server the platform did not configure
(`UnknownServer`: the definition names servers, never URLs) and a query `promql_scope.confine`
cannot confine to the namespace (`InvalidQuery`, its reason). Only the confined text is ever
sent, each `interval`, as an instant query through `prometheus.client.PrometheusClient` (the
lean pool; one client per configured server, shared by the definitions that name it, closed
with the backend).

The answer, an instant vector (or a scalar: one value): over the namespace's
`seriesPerQuery` it is refused whole (`Confined.series_refusal`: the source's error, no
value); else each sample with a finite value is a `Value` at Prometheus's evaluation time.
External: every series, with its labels (`__name__` dropped), so the request's label selector
filters them and the HPA sums them. Pods: the series labelled `pod` (a pod of the namespace:
every selector read only its series), several of one pod summed. Object: those of the pods the
described workload owns (`workload_pods`, fed by the namespace's shared watches of its Running
pods and ReplicaSets: `watched.py`, one of each for every definition of the namespace), summed
or averaged.

Cost: the maker O(query) (the confinement, once per generation); a refresh one query and
O(series of the answer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from custom_metrics_server.backends.definitions.polled import Polled
from custom_metrics_server.backends.definitions.promql_scope import Confined, confine
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, Refused
from custom_metrics_server.backends.definitions.watched import (
    REPLICASETS,
    RUNNING_PODS,
    subscriptions,
)
from custom_metrics_server.backends.definitions.workload_pods import WorkloadPods
from custom_metrics_server.kube.shared_watches import Subscriptions
from custom_metrics_server.prometheus.answers import PrometheusError
from custom_metrics_server.prometheus.client import PrometheusClient
from custom_metrics_server.prometheus.rules import ServerConfig

__all__ = ["PrometheusServers", "PrometheusSource", "make_prometheus"]


@dataclass
class PrometheusServers:
    """The Prometheus servers the platform configured for definitions, by name, and their
    clients (made at the first definition naming one, closed by `aclose`)."""

    servers: Mapping[str, ServerConfig] = field(default_factory=dict)
    #: the server of a definition that names none (None: such a definition is refused)
    default: str | None = None
    timeout: float = 10.0
    _clients: dict[str, PrometheusClient] = field(default_factory=dict)

    def client(self, name: str) -> PrometheusClient:
        """The one client of server `name` (configured: the maker checked)."""
        client = self._clients.get(name)
        if client is None:
            client = PrometheusClient(self.servers[name], timeout=self.timeout, retries=1)
            self._clients[name] = client
        return client

    async def aclose(self) -> None:
        """Close every client made."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


class PrometheusSource(Polled):
    """One definition's confined query (see the module)."""

    def __init__(
        self,
        definition: Definition,
        confined: Confined,
        client: PrometheusClient,
        tools: SourceTools,
    ) -> None:
        super().__init__(definition.interval)
        self.confined = confined
        self.client = client
        self.served = definition.served_as.type
        self.workload = definition.served_as.workload
        self.pods: WorkloadPods | None = None
        self.watches: Subscriptions | None = None
        if self.workload is not None:
            namespace = definition.namespace
            name = f"mdef-{namespace}-{definition.name}"
            self.pods = WorkloadPods(self.workload)
            self.watches = subscriptions(tools, namespace)
            self.watches.add(RUNNING_PODS, self.pods.owners, name=f"{name}-pods")
            if self.pods.needs_replicasets:
                self.watches.add(REPLICASETS, self.pods.replicasets, name=f"{name}-replicasets")

    async def __aenter__(self) -> Self:
        if self.watches is not None:
            await self.watches.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.watches is not None:
            await self.watches.__aexit__(exc_type, exc, tb)

    async def read(self) -> list[Value]:
        """The confined query, once; its answer as values."""
        try:
            data = await self.client.query(self.confined.query)
        except PrometheusError as err:
            raise SourceError(f"the query failed ({err.kind}): {err}") from None
        series = _samples(data)
        refusal = self.confined.series_refusal(len(series))
        if refusal is not None:
            raise SourceError(refusal)
        if self.served == "External":
            return [Value(value, at, labels) for labels, value, at in series]
        members: set[str] | None = None
        if self.pods is not None and self.watches is not None:
            unlisted = await self.watches.wait_synced(self.client.timeout)
            if unlisted is not None:
                raise SourceError(f"the workload's pods are not listed yet ({unlisted})")
            members = self.pods.members()
        found = []
        for labels, value, at in series:
            pod = labels.get("pod")
            if not pod:
                continue
            owners = (
                frozenset({self.workload})
                if self.workload is not None and members is not None and pod in members
                else frozenset()
            )
            found.append(Value(value, at, {"pod": pod}, pod=pod, workloads=owners))
        return found


def _samples(data: Mapping[str, Any]) -> list[tuple[dict[str, str], float, float]]:
    """(labels, value, time) of each finite sample of an instant answer. O(series)."""
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar" and isinstance(result, list):
        rows: list[Any] = [{"metric": {}, "value": result}]
    elif kind == "vector" and isinstance(result, list):
        rows = result
    else:
        raise SourceError(f"the query answered a {kind}: an instant vector or a scalar is served")
    found = []
    for row in rows:
        try:
            at, text = row["value"]
            value, when = float(text), float(at)
            labels = {str(k): str(v) for k, v in (row.get("metric") or {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SourceError("the answer is malformed (a sample without a value)") from None
        if math.isfinite(value):
            labels.pop("__name__", None)
            found.append((labels, value, when))
    return found


def make_prometheus(definition: Definition, tools: SourceTools) -> PrometheusSource:
    """The `SourceMaker` of `Prometheus`: the server checked and the query confined here."""
    servers = tools.settings.get("prometheus")
    if not isinstance(servers, PrometheusServers) or not servers.servers:
        raise Refused("UnknownServer", "the platform configured no Prometheus server")
    spec = definition.source_spec
    named = spec.get("server")
    name = str(named) if named else servers.default
    if name is None or name not in servers.servers:
        known = ", ".join(sorted(servers.servers))
        what = f"server {name!r}" if name else "no server, and there is no default one"
        raise Refused(
            "UnknownServer",
            f"spec.source.prometheus: {what} is not one the platform configured ({known})",
        )
    query = spec.get("query")
    if not isinstance(query, str) or not query.strip():
        raise Refused("InvalidQuery", "spec.source.prometheus.query is required")
    limit = tools.namespace_limits(definition.namespace).series_per_query
    confined = confine(query, definition.namespace, max_series=limit)
    if not isinstance(confined, Confined):
        raise Refused("InvalidQuery", f"spec.source.prometheus.query: {confined.reason}")
    return PrometheusSource(definition, confined, servers.client(name), tools)
