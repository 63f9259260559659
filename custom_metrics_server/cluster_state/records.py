"""The cluster as the resource model needs it: compact records built from Kubernetes JSON.

`ClusterState` is an `InMemoryCluster` (REST mapping + label index, so it is the server's
`ClusterView`) that also keeps, per pod, only what KEP-1748 needs: the node, scheduler,
priority, lifecycle state, effective requests and limits (computed once per resource shape by
:mod:`.resource_shapes` with the resource model: as the scheduler holds them, as its
`/metrics/resources` reports them, and the request the HPA divides usage by), and its
controller; per node, the allocatable resources and address; per workload, its controller. No
JSON object is kept: a watch event is reduced to a record and dropped. Indexes by node,
namespace and owner make "the pods this object holds" O(result).

Objects arrive through `sink(resource)`, one `WatchSink`-shaped adapter per watched resource:
the Kubernetes backend's reflectors and the simulated cluster feed the same adapters, so the
demo exercises the exact code the cluster path runs.

Cost: one event is O(containers x resources) for a pod, O(labels) otherwise; a relist is
O(objects) plus the deletions of objects not seen again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from sys import intern
from typing import Any, Final, NamedTuple

from custom_metrics_server.cluster.in_memory import InMemoryCluster, Resolver
from custom_metrics_server.cluster.restmapper import BUILTIN_MAPPINGS
from custom_metrics_server.cluster_state.record_inputs import (
    Object,
    deleted_key,
    identity,
    node_inputs,
    pod_inputs,
)
from custom_metrics_server.cluster_state.resource_shapes import ResourceShapes
from custom_metrics_server.domain import GroupResource, ObjectKey, Readiness, ResourceMapping
from custom_metrics_server.machinery.journal import Journal
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.runtime.heap import settle_heap

logger = logging.getLogger(__name__)

PODS: Final = GroupResource("", "pods")
NODES: Final = GroupResource("", "nodes")
NAMESPACES: Final = GroupResource("", "namespaces")
#: Workload resources whose pods are found through ownerReferences.
WORKLOADS: Final = (
    GroupResource("apps", "deployments"),
    GroupResource("apps", "replicasets"),
    GroupResource("apps", "statefulsets"),
    GroupResource("apps", "daemonsets"),
    GroupResource("batch", "jobs"),
)
WATCHED: Final = (PODS, NODES, NAMESPACES, *WORKLOADS)
DEFAULT_SCHEDULER: Final = "default-scheduler"
#: Distinct controllers whose tuple is shared before the table starts over.
_OWNERS: Final = 65536


class PodRecord(NamedTuple):
    """What the resource model keeps of one pod (a named tuple: built 4x faster than a frozen
    dataclass, 150,000 times per list at the envelope's scale, and as immutable).

    `requests`/`limits` are what the scheduler holds for the pod (`DEFAULT_OPTIONS`: the
    larger of spec, allocated and actual during an in-place resize); `metric_requests`/
    `metric_limits` what kube-scheduler's `/metrics/resources` reports (`PodResourcesOptions{}`:
    the spec); `hpa_requests` the HPA's denominator (`hpa_pod_requests`). Pods without resize
    status share one mapping for the first two views.
    """

    namespace: str
    name: str
    node: str
    scheduler: str
    priority: str
    lifecycle: str
    requests: Mapping[str, Decimal]
    limits: Mapping[str, Decimal]
    owner: tuple[str, str] | None  # controller (kind, name)
    metric_requests: Mapping[str, Decimal]
    metric_limits: Mapping[str, Decimal]
    hpa_requests: Mapping[str, Decimal]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What the resource model keeps of one node."""

    name: str
    allocatable: Mapping[str, Decimal]
    internal_ip: str


def _resources(values: Mapping[str, Any] | None) -> dict[str, Decimal]:
    found: dict[str, Decimal] = {}
    for name, text in (values or {}).items():
        try:
            value = Quantity.parse(str(text)).value
        except ValueError:
            logger.warning("ignoring unparsable quantity %s=%r", name, text)
            continue
        if value:
            found[name] = value
    return found


class _Sink:
    """The `WatchSink` of one resource: relists diff against what was seen."""

    def __init__(self, state: ClusterState, group_resource: GroupResource) -> None:
        self._state = state
        self._gr = group_resource
        self._seen: set[ObjectKey] | None = None
        self.synced = False

    def list_started(self) -> None:
        self._seen = set()

    def listed(self, obj: Object) -> None:
        key = self._state.apply(self._gr, obj)
        if self._seen is not None and key is not None:
            self._seen.add(key)

    def list_finished(self) -> None:
        seen = self._seen or set()
        for key in [key for key in self._state.keys(self._gr) if key not in seen]:
            self._state.remove(self._gr, key)
        self._seen = None
        self.synced = True
        settle_heap()  # a (re)list just built or replaced most of this resource's records

    def event(self, type: str, obj: Object) -> None:
        if type == "DELETED":
            self._state.remove(self._gr, deleted_key(obj))
        else:
            self._state.apply(self._gr, obj)


class ClusterState(InMemoryCluster):
    """Compact records of pods, nodes, namespaces and workloads, fed by watch sinks."""

    def __init__(
        self,
        mappings: Iterable[ResourceMapping] = BUILTIN_MAPPINGS,
        *,
        resolver: Resolver | None = None,
    ) -> None:
        super().__init__(mappings, resolver=resolver)
        self.pods: dict[ObjectKey, PodRecord] = {}
        self.nodes: dict[str, NodeRecord] = {}
        # A list per node (~30-110 pods: removal is a short scan, and a list of 30 keys is
        # ~300 bytes where a set is ~2 KiB); pods by namespace come from the inventory.
        self._by_node: dict[str, list[ObjectKey]] = {}
        # (namespace, owner kind, owner name) -> {(child kind, child name)}, and for pods
        # -> {pod key}
        self._children: dict[tuple[str, str, str], set[tuple[str, str]]] = {}
        self._child_pods: dict[tuple[str, str, str], set[ObjectKey]] = {}
        self._owners: dict[tuple[str, str], tuple[tuple[str, str]]] = {}
        self._sinks = {gr: _Sink(self, gr) for gr in WATCHED}
        self._shapes = ResourceShapes()
        self.generation = 0
        #: The pods whose record was replaced or removed, in order (`journal`).
        self.pod_journal: Journal[ObjectKey] = Journal()

    def sink(self, group_resource: GroupResource) -> _Sink:
        """The watch sink feeding one watched resource."""
        return self._sinks[group_resource]

    def load(self, objects: Mapping[GroupResource, Iterable[dict[str, Any]]]) -> None:
        """Replace every watched resource with these API objects, as one full list each (the
        demo world and tests; the watches feed the sinks themselves). O(objects)."""
        for resource in WATCHED:
            sink = self.sink(resource)
            sink.list_started()
            for obj in objects.get(resource, ()):
                sink.listed(obj)
            sink.list_finished()

    def ready(self) -> Readiness:
        """Ready once every watched resource has been listed once."""
        waiting = [str(gr) for gr, sink in self._sinks.items() if not sink.synced]
        if waiting:
            return Readiness(
                ready=False, reason="waiting for the first list of " + ", ".join(waiting)
            )
        return Readiness(ready=True)

    def keys(self, group_resource: GroupResource) -> list[ObjectKey]:
        """Keys of every object of a watched resource."""
        return list(self.inventory.table(group_resource))

    # Ingestion ------------------------------------------------------------------------------

    def apply(self, group_resource: GroupResource, obj: Object) -> ObjectKey | None:
        """Add or replace one object from its JSON (a dict, or `wire_objects`' structs);
        returns its key (None if unusable).
        Namespaces, node names, schedulers and controllers are interned: 150,000 pods hold a
        few thousand distinct strings of them, not 150,000 copies each."""
        name, namespace, labels, controller = identity(obj)
        if not name:
            return None
        mapping = self._by_kind[group_resource]
        namespace = intern(namespace or "") if mapping.namespaced else ""
        if not namespace and mapping.namespaced:
            raise ValueError(f"{group_resource} is namespaced; namespace '' does not fit")
        key = (namespace, name)
        owners = self._shared_owners(controller)
        owner = owners[0] if owners else None
        previous = self.inventory.get(group_resource, key)
        old_owner = previous.owners[0] if previous is not None and previous.owners else None
        self.put(mapping, key, labels, owners)
        if owner != old_owner:
            self._move_child(group_resource, key, old_owner, owner)
        if group_resource == PODS:
            self._apply_pod(key, obj, owner)
        elif group_resource == NODES:
            self._apply_node(name, obj)
        self.generation += 1
        return key

    def _shared_owners(self, owner: tuple[str, str] | None) -> tuple[tuple[str, str], ...]:
        """`(controller,)`, one tuple per distinct controller (a ReplicaSet's pods share it)."""
        if owner is None:
            return ()
        found = self._owners.get(owner)
        if found is None:
            if len(self._owners) >= _OWNERS:
                self._owners.clear()  # only sharing is lost
            found = self._owners[owner] = ((intern(owner[0]), intern(owner[1])),)
        return found

    def _move_child(
        self,
        gr: GroupResource,
        key: ObjectKey,
        old: tuple[str, str] | None,
        new: tuple[str, str] | None,
    ) -> None:
        """Re-file an object under its new controller (the owner index has no reverse map:
        the previous controller is read from the object's previous record). Pods are filed
        by their key (the record's own tuple), other objects by (kind, name)."""
        if gr == PODS:
            index, child = self._child_pods, key
        else:
            index, child = self._children, (self._kind(gr), key[1])
        if old is not None:
            owner = (key[0], *old)
            siblings = index.get(owner)
            if siblings is not None:
                siblings.discard(child)
                if not siblings:
                    del index[owner]
        if new is not None:
            index.setdefault((key[0], *new), set()).add(child)

    def _kind(self, gr: GroupResource) -> str:
        mapping = self._by_kind.get(gr)
        return mapping.kind if mapping else gr.resource

    def _apply_pod(self, key: ObjectKey, pod: Object, owner: tuple[str, str] | None) -> None:
        node, scheduler, priority, state = pod_inputs(pod)
        requests, limits, metric_requests, metric_limits, hpa = self._shapes.of(key, pod)
        # Positional: a NamedTuple's keyword call costs ~0.2 µs more, 150,000 times a list.
        record = PodRecord(
            key[0],  # namespace
            key[1],  # name
            intern(str(node or "")),  # node
            intern(str(scheduler or DEFAULT_SCHEDULER)),  # scheduler
            "" if priority is None else intern(str(priority)),  # priority
            state,  # lifecycle
            requests,
            limits,
            owner,
            metric_requests,
            metric_limits,
            hpa,  # hpa_requests
        )
        old = self.pods.get(key)
        self.pods[key] = record
        self.pod_journal.append(key)
        if old is not None and old.node == record.node:
            return  # filed already (most updates: status changes on the same node)
        self._unindex_pod(key, old)
        if record.node:
            self._by_node.setdefault(record.node, []).append(key)

    def _apply_node(self, name: str, node: Object) -> None:
        allocatable, address = node_inputs(node)
        self.nodes[name] = NodeRecord(
            name=name, allocatable=_resources(allocatable), internal_ip=address
        )

    def remove(self, group_resource: GroupResource, key: ObjectKey) -> None:
        """Forget one object."""
        previous = self.inventory.get(group_resource, key)
        if previous is not None and previous.owners:
            self._move_child(group_resource, key, previous.owners[0], None)
        self.inventory.delete(group_resource, key)
        if group_resource == PODS:
            self._unindex_pod(key, self.pods.pop(key, None))
            self.pod_journal.append(key)
        elif group_resource == NODES:
            self.nodes.pop(key[1], None)
        self.generation += 1

    def _unindex_pod(self, key: ObjectKey, old: PodRecord | None) -> None:
        if old is None:
            return
        on_node = self._by_node.get(old.node) if old.node else None
        if on_node is not None:
            with contextlib.suppress(ValueError):
                on_node.remove(key)
            if not on_node:
                del self._by_node[old.node]

    # Queries --------------------------------------------------------------------------------

    def pod_key(self, key: ObjectKey) -> ObjectKey:
        """``key`` made of the strings of the pod's record when there is one, so that another
        index of pods (the usage store) holds no second copy of 150,000 names. O(1)."""
        pod = self.pods.get(key)
        return key if pod is None else (pod.namespace, pod.name)

    def pods_on_node(self, node: str) -> list[PodRecord]:
        """Runnable pods bound to a node (what its capacity is spent on)."""
        return [
            pod
            for key in self._by_node.get(node, ())
            if (pod := self.pods[key]).lifecycle == "Runnable"
        ]

    def pods_in_namespace(self, namespace: str) -> list[PodRecord]:
        """Schedulable and Runnable pods of a namespace (the quota view)."""
        return [
            pod
            for key in self.inventory.keys_in(PODS, namespace)
            if (pod := self.pods.get(key)) is not None and pod.lifecycle != "Completed"
        ]

    def pods_owned_by(self, namespace: str, kind: str, name: str) -> list[PodRecord]:
        """Non-completed pods under a workload, through any depth of controllers."""
        found: list[PodRecord] = []
        pending = [(kind, name)]
        visited: set[tuple[str, str]] = set()
        while pending:
            current = pending.pop()
            if current in visited:
                continue
            visited.add(current)
            owner = (namespace, *current)
            for key in self._child_pods.get(owner, ()):
                pod = self.pods.get(key)
                if pod is not None and pod.lifecycle != "Completed":
                    found.append(pod)
            pending.extend(self._children.get(owner, ()))
        return found

    def pods_of(self, group_resource: GroupResource, key: ObjectKey) -> list[PodRecord] | None:
        """The pods an object holds, or None if the object is unknown."""
        if group_resource == PODS:
            pod = self.pods.get(key)
            return None if pod is None else ([] if pod.lifecycle == "Completed" else [pod])
        if self.inventory.get(group_resource, key) is None:
            return None
        if group_resource == NAMESPACES:
            return self.pods_in_namespace(key[1])
        if group_resource == NODES:
            return self.pods_on_node(key[1])
        return self.pods_owned_by(key[0], self._kind(group_resource), key[1])
