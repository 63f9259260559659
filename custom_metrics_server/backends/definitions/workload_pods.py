"""Which pods of one namespace a workload owns, for a `prometheus` definition served as an
Object metric (its series labelled `pod` are summed or averaged over the workload's pods, as
the `pods` source's are).

`WorkloadPods` is the `WatchSink` of the namespace's Running pods (`owners`, keeping each pod's
controller from its `ownerReferences`, nothing else) and, for a Deployment, of its ReplicaSets
(`replicasets`: which ReplicaSets the Deployment controls), the ownership the HPA counts: a
Deployment's pods are those of its ReplicaSets, old and new during a rollout.

PURE: no I/O (the source runs the watches). Cost: an event O(1); `members` O(pods).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from custom_metrics_server.cluster_state.record_inputs import controller_of
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.keyed_sink import KeyedSink, name_of

__all__ = ["WorkloadPods"]

_KINDS = {
    GroupResource("apps", "deployments"): "Deployment",
    GroupResource("apps", "statefulsets"): "StatefulSet",
    GroupResource("apps", "replicasets"): "ReplicaSet",
    GroupResource("apps", "daemonsets"): "DaemonSet",
    GroupResource("batch", "jobs"): "Job",
}


class _Controllers(KeyedSink[str]):
    """name -> the (kind, name) controlling it, for one collection of the namespace."""

    def __init__(self) -> None:
        super().__init__()
        self.by_name: dict[str, tuple[str, str] | None] = {}

    def apply(self, obj: Mapping[str, Any]) -> str | None:
        name = name_of(obj)
        if name is not None:
            self.by_name[name] = controller_of(obj.get("metadata") or {})
        return name

    def remove(self, key: str) -> None:
        self.by_name.pop(key, None)

    def keys(self) -> Iterable[str]:
        return self.by_name.keys()

    def key_of(self, obj: Mapping[str, Any]) -> str | None:
        return name_of(obj)


class WorkloadPods:
    """The pods of one workload of a namespace (see the module)."""

    def __init__(self, workload: tuple[GroupResource, str]) -> None:
        resource, self.name = workload
        self.kind = _KINDS.get(resource, "")
        self.owners = _Controllers()
        self.replicasets = _Controllers()

    @property
    def needs_replicasets(self) -> bool:
        """A Deployment owns its pods through ReplicaSets."""
        return self.kind == "Deployment"

    def members(self) -> set[str]:
        """The names of the workload's pods now. O(pods)."""
        if self.needs_replicasets:
            mine = {
                name
                for name, owner in self.replicasets.by_name.items()
                if owner == ("Deployment", self.name)
            }
            return {
                pod
                for pod, owner in self.owners.by_name.items()
                if owner is not None and owner[0] == "ReplicaSet" and owner[1] in mine
            }
        wanted = (self.kind, self.name)
        return {pod for pod, owner in self.owners.by_name.items() if owner == wanted}
