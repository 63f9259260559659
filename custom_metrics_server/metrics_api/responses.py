"""The Resource Metrics API, `metrics.k8s.io` `v1` and `v1beta1` (what `kubectl top` and the
HPA's resource metrics read), served as metrics-server serves v1beta1.

PURE request/response logic: a parsed request (:mod:`.request`, the grammar and the
`Accept` views) in, a JSON-shaped document (plain dicts and lists, exactly the JSON wire form)
or a `StatusError` out. No I/O, no web framework; `endpoints` routes `/apis/metrics.k8s.io/...`
here. The pieces of a document that need no lookup (discovery, quantities, metadata, the Table)
are :mod:`.render`. Both versions answer the same objects; only `apiVersion` differs.

Sources: the cluster's pods and nodes (`ClusterState`, the same records the watches or the demo
feed) and the usage store the kubelet scraper (or the simulated kubelets) already fill
(`usage.store.UsageStore`); nothing is scraped twice. Rules, from metrics-server (`pkg/api/pod.go`,
`node.go`, `filter.go`, `table.go`, `pkg/storage/*`):

* a pod appears when it is running (in the pod lister) and every container of its latest
  kubelet sample has two points (a container whose counter or start time went back is left
  out); its `timestamp`/`window` are those of its container with the earliest timestamp;
* a node appears once it has two samples; `timestamp` is the later sample's time, `window` the
  span between the two, rendered as a Go duration (`15s`, `20.038s`, `1m0s`);
* usage is `cpu` in whole nanocores (truncated, then a canonical quantity: `12345678n`,
  `1500u`, `2`) and `memory` in bytes (BinarySI: `128Mi`, `1k` below 1024 as Go prints it);
* lists are sorted by namespace then name; `labelSelector` and `fieldSelector`
  (`metadata.name`, `metadata.namespace`; nodes carry no namespace field) filter them;
* a `Table` (`as=Table;g=meta.k8s.io;v=v1` or `v1beta1`) has metrics-server's columns: Name,
  one quantity column per resource (sorted) and Window.

Costs: a list is O(pods matched x containers), plus the label index lookup (memoised per
selector); a get is O(containers). No pydantic, no per-item objects beyond the output dicts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from custom_metrics_server.api import protobuf, wire
from custom_metrics_server.api.negotiation import SERVED_MEDIA_TYPES
from custom_metrics_server.cluster_state.records import NODES, PODS, ClusterState
from custom_metrics_server.errors import not_acceptable
from custom_metrics_server.machinery.durations import format_go_duration
from custom_metrics_server.machinery.fields import FIELD_EVERYTHING, FieldSelector
from custom_metrics_server.machinery.labels import EVERYTHING, Selector
from custom_metrics_server.metrics_api.render import (
    api_group,
    api_resource_list,
    memory_quantity,
    metadata,
    metrics_table,
    nanocores_quantity,
    not_found,
)
from custom_metrics_server.metrics_api.request import (
    GROUP,
    VERSIONS,
    MetricsApiRequest,
    View,
)
from custom_metrics_server.usage.values import ResourceUsage

__all__ = ["ResourceMetricsApi", "ResourceUsageSource", "discovery_documents"]


class ResourceUsageSource(Protocol):
    """Per-container pod usage and node usage (`usage.store.UsageStore` provides both)."""

    def pod_resource_usage(self, namespace: str, pod: str) -> ResourceUsage | None: ...

    def node_resource_usage(self, node: str) -> ResourceUsage | None: ...


#: `apiVersion` of the documents built without a request (the version metrics-server serves).
DEFAULT_API_VERSION: Final = f"{GROUP}/v1beta1"


def discovery_documents() -> dict[str, dict[str, dict[str, Any]]]:
    """group -> version -> `APIResourceList`, versions preferred first: what `/apis` lists and
    aggregated discovery publishes for this group."""
    return {GROUP: {version: api_resource_list(f"{GROUP}/{version}") for version in VERSIONS}}


# The API --------------------------------------------------------------------------------------


class ResourceMetricsApi:
    """`PodMetrics` and `NodeMetrics` from the cluster records and the usage store."""

    def __init__(
        self,
        cluster: ClusterState,
        usage: ResourceUsageSource,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.usage = usage
        self._clock = clock
        # (namespace, name) -> (usage, labels, body, sorted labels): the rendered parts of an
        # item, reused while the store returns the same usage object (until the next scrape
        # of the node) and the record the same labels mapping. Bounded by the pods served.
        self._pod_parts: dict[
            tuple[str, str],
            tuple[ResourceUsage, Mapping[str, str], dict[str, Any], dict[str, str]],
        ] = {}

    # -- the JSON-shaped documents (also the input of a protobuf encoder) --

    def document(self, request: MetricsApiRequest) -> dict[str, Any]:
        """The JSON-shaped answer to a parsed request (discovery, an object or a list), or a
        `StatusError`. Dicts and lists exactly as the JSON wire form, in Go field order."""
        if request.kind == "group":
            return api_group(GROUP, VERSIONS)
        api_version = request.api_version
        if request.kind == "version":
            return api_resource_list(api_version)
        if request.kind == "pods":
            if request.name is not None:
                return self.pod_metrics(request.namespace or "", request.name, api_version)
            return self.pod_metrics_list(
                request.namespace, request.label_selector, request.field_selector, api_version
            )
        if request.name is not None:
            return self.node_metrics(request.name, api_version)
        return self.node_metrics_list(request.label_selector, request.field_selector, api_version)

    def pod_metrics_list(
        self,
        namespace: str | None,
        label_selector: Selector = EVERYTHING,
        field_selector: FieldSelector = FIELD_EVERYTHING,
        api_version: str = DEFAULT_API_VERSION,
    ) -> dict[str, Any]:
        """`PodMetricsList` (items without kind/apiVersion, as Go encodes list items).
        O(matched pods x containers)."""
        return {
            "kind": "PodMetricsList",
            "apiVersion": api_version,
            "metadata": {},
            "items": self._pod_items(namespace, label_selector, field_selector),
        }

    def pod_metrics(
        self, namespace: str, name: str, api_version: str = DEFAULT_API_VERSION
    ) -> dict[str, Any]:
        """One `PodMetrics`; 404 `pods "name" not found` for an unknown (or not running) pod,
        404 `podmetrics.metrics.k8s.io "ns/name" not found` while it has no usage."""
        pod = self.cluster.pods.get((namespace, name))
        if pod is None or pod.lifecycle != "Runnable":
            raise not_found("", "pods", name)
        record = self.cluster.inventory.get(PODS, (namespace, name))
        labels = record.labels if record is not None else {}
        item = self._pod_item(namespace, name, labels, wire.format_time(self._clock()))
        if item is None:
            raise not_found(GROUP, "podmetrics", f"{namespace}/{name}")
        return {"kind": "PodMetrics", "apiVersion": api_version, **item}

    def node_metrics_list(
        self,
        label_selector: Selector = EVERYTHING,
        field_selector: FieldSelector = FIELD_EVERYTHING,
        api_version: str = DEFAULT_API_VERSION,
    ) -> dict[str, Any]:
        """`NodeMetricsList`, sorted by name. O(matched nodes)."""
        return {
            "kind": "NodeMetricsList",
            "apiVersion": api_version,
            "metadata": {},
            "items": self._node_items(label_selector, field_selector),
        }

    def node_metrics(self, name: str, api_version: str = DEFAULT_API_VERSION) -> dict[str, Any]:
        """One `NodeMetrics`; 404 `node "name" not found` (the node lister's wording) for an
        unknown node, 404 `nodemetrics.metrics.k8s.io "name" not found` without usage."""
        record = self.cluster.inventory.get(NODES, ("", name))
        if record is None:
            raise not_found("", "node", name)
        item = self._node_item(name, record.labels, wire.format_time(self._clock()))
        if item is None:
            raise not_found(GROUP, "nodemetrics", name)
        return {"kind": "NodeMetrics", "apiVersion": api_version, **item}

    # -- bytes --

    def render(
        self, request: MetricsApiRequest, view: View = "json", *, pretty: bool = False
    ) -> bytes:
        """The response body: the document in protobuf, or it (or its Table) through the
        Go-compatible JSON encoder."""
        document = self.document(request)
        if view == "protobuf":
            return protobuf.encode_document(document)
        if view != "json" and request.kind in ("pods", "nodes"):
            document = metrics_table(document, version=view, include_object=request.include_object)
        elif view != "json":
            raise not_acceptable(SERVED_MEDIA_TYPES)
        body = wire.dumps(document)
        return wire.prettify(body) if pretty else body

    # -- items --

    def _pod_items(
        self, namespace: str | None, label_selector: Selector, field_selector: FieldSelector
    ) -> list[dict[str, Any]]:
        cluster = self.cluster
        keys = cluster.inventory.select(PODS, namespace, label_selector)
        records = cluster.inventory.table(PODS)
        pods = cluster.pods
        created = wire.format_time(self._clock())
        check_fields = not field_selector.is_everything()
        items: list[dict[str, Any]] = []
        append = items.append
        for key in keys:
            pod = pods.get(key)
            if pod is None or pod.lifecycle != "Runnable":
                continue
            if check_fields and not field_selector.matches(
                {"metadata.name": key[1], "metadata.namespace": key[0]}
            ):
                continue
            record = records.get(key)
            item = self._pod_item(key[0], key[1], record.labels if record else {}, created)
            if item is not None:
                append(item)
        return items

    def _pod_item(
        self, namespace: str, name: str, labels: Mapping[str, str], created: str | None
    ) -> dict[str, Any] | None:
        usage = self.usage.pod_resource_usage(namespace, name)
        if usage is None:
            return None
        key = (namespace, name)
        parts = self._pod_parts.get(key)
        if parts is None or parts[0] is not usage or parts[1] is not labels:
            body = {
                "timestamp": wire.format_time(usage.timestamp),
                "window": format_go_duration(usage.window_ns),
                "containers": [
                    {
                        "name": container.name,
                        "usage": {
                            "cpu": nanocores_quantity(container.nanocores),
                            "memory": memory_quantity(container.memory_bytes),
                        },
                    }
                    for container in usage.containers
                ],
            }
            if len(self._pod_parts) > 2 * len(self.cluster.pods) + 1024:
                self._pod_parts.clear()
            parts = self._pod_parts[key] = (usage, labels, body, dict(sorted(labels.items())))
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
        }
        if parts[3]:
            metadata["labels"] = parts[3]
        return {"metadata": metadata, **parts[2]}

    def _node_items(
        self, label_selector: Selector, field_selector: FieldSelector
    ) -> list[dict[str, Any]]:
        inventory = self.cluster.inventory
        records = inventory.table(NODES)
        created = wire.format_time(self._clock())
        check_fields = not field_selector.is_everything()
        items: list[dict[str, Any]] = []
        for key in inventory.select(NODES, None, label_selector):
            # Nodes have no namespace field (AddObjectMetaFieldsSet(..., false)).
            if check_fields and not field_selector.matches({"metadata.name": key[1]}):
                continue
            record = records.get(key)
            item = self._node_item(key[1], record.labels if record else {}, created)
            if item is not None:
                items.append(item)
        return items

    def _node_item(
        self, name: str, labels: Mapping[str, str], created: str | None
    ) -> dict[str, Any] | None:
        usage = self.usage.node_resource_usage(name)
        if usage is None:
            return None
        return {
            "metadata": metadata(name, None, created, labels),
            "timestamp": wire.format_time(usage.timestamp),
            "window": format_go_duration(usage.window_ns),
            "usage": {
                "cpu": nanocores_quantity(usage.nanocores),
                "memory": memory_quantity(usage.memory_bytes),
            },
        }
