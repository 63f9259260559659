"""Resolve `{resource}` path strings to kinds, versions and scopes.

PURE, in memory. Lookup follows apimachinery's `DefaultRESTMapper`: the input is lower-cased,
plural and singular names both match, and a group matches exactly or, failing that, by prefix
(`storageclass.storage` finds `storageclasses.storage.k8s.io`). Several matches are ambiguous
and resolve to nothing. `BUILTIN_MAPPINGS` holds the well-known kinds; live discovery (the
Kubernetes backend) feeds its own list through the same class.

Cost: O(1) dictionary lookups for exact names, O(resources) for the group-prefix fallback;
answers are memoised per input string.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from custom_metrics_server.domain import GroupResource, ResourceMapping


def _m(
    group: str, version: str, resource: str, kind: str, *, namespaced: bool, singular: str
) -> ResourceMapping:
    return ResourceMapping(
        group_resource=GroupResource(group, resource),
        version=version,
        kind=kind,
        namespaced=namespaced,
        singular=singular,
    )


BUILTIN_MAPPINGS: Final = (
    _m("", "v1", "pods", "Pod", namespaced=True, singular="pod"),
    _m("", "v1", "nodes", "Node", namespaced=False, singular="node"),
    _m("", "v1", "namespaces", "Namespace", namespaced=False, singular="namespace"),
    _m("", "v1", "services", "Service", namespaced=True, singular="service"),
    _m("", "v1", "endpoints", "Endpoints", namespaced=True, singular="endpoints"),
    _m(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        namespaced=True,
        singular="persistentvolumeclaim",
    ),
    _m(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        namespaced=False,
        singular="persistentvolume",
    ),
    _m(
        "",
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        namespaced=True,
        singular="replicationcontroller",
    ),
    _m("apps", "v1", "deployments", "Deployment", namespaced=True, singular="deployment"),
    _m("apps", "v1", "replicasets", "ReplicaSet", namespaced=True, singular="replicaset"),
    _m("apps", "v1", "statefulsets", "StatefulSet", namespaced=True, singular="statefulset"),
    _m("apps", "v1", "daemonsets", "DaemonSet", namespaced=True, singular="daemonset"),
    _m("batch", "v1", "jobs", "Job", namespaced=True, singular="job"),
    _m("batch", "v1", "cronjobs", "CronJob", namespaced=True, singular="cronjob"),
    _m("networking.k8s.io", "v1", "ingresses", "Ingress", namespaced=True, singular="ingress"),
    _m(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        namespaced=True,
        singular="horizontalpodautoscaler",
    ),
    _m(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        namespaced=True,
        singular="poddisruptionbudget",
    ),
)


class RestMapper:
    """A fixed set of resource mappings with Kubernetes lookup semantics."""

    def __init__(self, mappings: Iterable[ResourceMapping]) -> None:
        self._mappings = tuple(mappings)
        self._by_name: dict[tuple[str, str], list[ResourceMapping]] = {}
        for mapping in self._mappings:
            gr = mapping.group_resource
            for name in {gr.resource, mapping.singular} - {""}:
                self._by_name.setdefault((gr.group, name), []).append(mapping)
        self._memo: dict[str, ResourceMapping | None] = {}

    @property
    def mappings(self) -> tuple[ResourceMapping, ...]:
        """Every known mapping, in the order given."""
        return self._mappings

    def mapping(self, resource: str) -> ResourceMapping | None:
        """The mapping a `{resource}` string names, or None if unknown or ambiguous."""
        try:
            return self._memo[resource]
        except KeyError:
            pass
        found = self._resolve(GroupResource.parse(resource.lower()))
        if len(self._memo) < 4096:  # bounded: request paths are attacker-controlled
            self._memo[resource] = found
        return found

    def _resolve(self, wanted: GroupResource) -> ResourceMapping | None:
        exact = self._by_name.get((wanted.group, wanted.resource), [])
        if len(exact) == 1:
            return exact[0]
        if exact:
            return None
        prefixed = [
            mapping
            for (group, name), mappings in self._by_name.items()
            if name == wanted.resource and wanted.group and group.startswith(wanted.group + ".")
            for mapping in mappings
        ]
        unique = set(prefixed)
        return unique.pop() if len(unique) == 1 else None
