"""A read-only core API subset for the demo: `/api`, `/api/v1`, nodes and pods.

Why: `kubectl top` reads `metrics.k8s.io` *and* the core API from the server its kubeconfig
names. `kubectl top node` lists `/api/v1/nodes` for the allocatable it divides usage by, and
`kubectl top pod` reads `/api/v1/.../pods` when a metrics answer is empty (to tell "not ready
yet" from "not there"). In a cluster the kube-apiserver serves those paths and the APIService
routes only `/apis/metrics.k8s.io` here, so this subset is wired **only in `--demo`**, where
the printed kubeconfig names this server: it serves the simulated cluster's own node and pod
objects (the JSON the demo's watch sinks were fed), nothing invented.

Served: `GET /api` (APIVersions), `/api/v1` (APIResourceList: nodes, pods with get/list),
`/api/v1/nodes[/{name}]`, `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods[/{name}]`, with
`labelSelector` and `fieldSelector` (`metadata.name`, `metadata.namespace`). Anything else
under `/api` is a 404 Status. Lists are sorted by namespace and name.

PURE: no I/O. Cost: a list is O(objects of the resource); a get is O(1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from custom_metrics_server.api.grammar import (
    QueryParams,
    check_selector_sizes,
    check_timeout,
    parse_field_selector_param,
    parse_label_selector,
    resource_route,
)
from custom_metrics_server.errors import MethodNotAllowed, NotFound, route_not_found
from custom_metrics_server.machinery.fields import FIELD_EVERYTHING, FieldSelector
from custom_metrics_server.machinery.labels import EVERYTHING, Selector

__all__ = ["CoreApiRequest", "DemoCoreApi", "is_core_api_path"]

_KINDS: Final = {"nodes": "Node", "pods": "Pod"}
_NAMESPACED: Final = {"nodes": False, "pods": True}


def is_core_api_path(path: str) -> bool:
    """`/api` or below. O(1)."""
    return path == "/api" or path.startswith("/api/")


@dataclass(frozen=True, slots=True)
class CoreApiRequest:
    """`resource` "" for discovery (`version` "" for `/api`); `name` None for a list."""

    version: str = ""
    resource: str = ""
    namespace: str | None = None
    name: str | None = None
    label_selector: Selector = EVERYTHING
    field_selector: FieldSelector = FIELD_EVERYTHING


class DemoCoreApi:
    """Nodes and pods (their JSON objects) behind the core API's read routes."""

    def __init__(self, objects: Mapping[str, Iterable[Mapping[str, Any]]]) -> None:
        self._objects: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
        for resource in _KINDS:
            table: dict[tuple[str, str], Mapping[str, Any]] = {}
            for obj in objects.get(resource, ()):
                metadata = obj.get("metadata") or {}
                namespace = "" if resource == "nodes" else str(metadata.get("namespace", ""))
                table[(namespace, str(metadata.get("name", "")))] = obj
            self._objects[resource] = dict(sorted(table.items()))

    def parse(self, path: str, query: QueryParams) -> CoreApiRequest:
        """The request a path names, or a `StatusError` (404 Status, 400, 405 for watch)."""
        check_timeout(query.timeout)
        check_selector_sizes(query)
        parts = path.strip("/").split("/")[1:]
        if not parts:
            return CoreApiRequest()
        if parts[0] != "v1":
            raise route_not_found()
        parts = parts[1:]
        if not parts:
            return CoreApiRequest("v1")
        resource, namespace, name = resource_route(parts, _NAMESPACED)
        if name is not None:
            return CoreApiRequest("v1", resource, namespace, name)
        if query.watch:
            raise MethodNotAllowed(
                f'watch is not supported on resources of kind "{resource}"',
                details={"kind": resource},
            )
        fields = parse_field_selector_param(query.field_selector)
        labels = parse_label_selector(query.label_selector)
        return CoreApiRequest("v1", resource, namespace, None, labels, fields)

    def document(self, request: CoreApiRequest, server_address: str = "") -> dict[str, Any]:
        """The JSON-shaped answer (APIVersions, APIResourceList, an object or a list)."""
        if not request.version:
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
                ],
            }
        if not request.resource:
            return {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    _resource("nodes", "node", namespaced=False, kind="Node"),
                    _resource("pods", "pod", namespaced=True, kind="Pod"),
                ],
            }
        table = self._objects[request.resource]
        kind = _KINDS[request.resource]
        if request.name is not None:
            found = table.get((request.namespace or "", request.name))
            if found is None:
                raise NotFound(
                    f'{request.resource} "{request.name}" not found',
                    details={"name": request.name, "kind": request.resource},
                )
            return {"kind": kind, "apiVersion": "v1", **found}
        items = []
        for (namespace, name), obj in table.items():
            if request.namespace is not None and namespace != request.namespace:
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if not request.label_selector.matches(labels):
                continue
            if not request.field_selector.is_everything():
                fields = {"metadata.name": name}
                if request.resource == "pods":
                    fields["metadata.namespace"] = namespace
                if not request.field_selector.matches(fields):
                    continue
            items.append(obj)
        return {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": items}


def _resource(name: str, singular: str, *, namespaced: bool, kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": singular,
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["get", "list"],
    }
