"""The objects of the demo cluster, as the Kubernetes JSON an API server would return.

PURE and deterministic: `generate(settings)` gives the same namespaces, nodes, workloads and
pods for the same seed and size: the workloads of :mod:`.demo_workloads` placed on nodes as a
scheduler would (first fit), plus pods too large for any node (pending forever) and completed
Job pods. It must not simulate usage or metrics (that is :mod:`.simulated`,
:mod:`.demo_kubelets`).

Cost: O(pods x nodes) for the placement, once at start.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from custom_metrics_server.backends.demo_workloads import Json, Workload, resources, workloads
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.resources.model import pod_requests

ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"  # the kube name-generator alphabet
PODS_PER_NODE: Final = 8


def crc(*parts: object) -> int:
    """A stable 32-bit hash of the parts."""
    return zlib.crc32("/".join(map(str, parts)).encode())


def unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from the parts."""
    return crc(*parts) / 2**32


def suffix(seed: int, *parts: object, length: int = 5) -> str:
    """A kube-style random name suffix, deterministic in its parts."""
    value = crc(seed, *parts)
    chars = []
    for _ in range(length):
        value, index = divmod(value, len(ALPHABET))
        chars.append(ALPHABET[index])
        value = value or crc(seed, *parts, len(chars))
    return "".join(chars)


@dataclass
class World:
    """Every object of the demo by resource, plus where each pod runs."""

    objects: dict[GroupResource, list[Json]] = field(default_factory=dict)
    node_of: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, resource: GroupResource, obj: Json) -> None:
        """Record one object."""
        self.objects.setdefault(resource, []).append(obj)


def _uid(namespace: str, name: str) -> str:
    return f"{crc(namespace, name, 'uid'):08x}-0000-4000-8000-{crc(name):012x}"


def _meta(
    name: str,
    namespace: str = "",
    labels: dict[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
) -> Json:
    meta: Json = {"name": name, "labels": dict(labels or {})}
    if namespace:
        meta["namespace"] = namespace
    meta["uid"] = _uid(namespace, name)
    if owner:
        api_version, kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": _uid(namespace, owner_name),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def _pod(
    name: str,
    namespace: str,
    labels: dict[str, str],
    workload: Workload,
    *,
    node: str,
    owner: tuple[str, str, str],
    phase: str = "Running",
) -> Json:
    spec: Json = {
        "containers": [dict(c) for c in workload.containers],
        "schedulerName": "default-scheduler",
    }
    if workload.init_containers:
        spec["initContainers"] = [dict(c) for c in workload.init_containers]
    if workload.overhead:
        spec["overhead"] = dict(workload.overhead)
        spec["runtimeClassName"] = "kata"
    if workload.priority is not None:
        spec["priority"] = workload.priority
        spec["priorityClassName"] = "critical-data"
    status: Json = {"phase": phase}
    if node:
        spec["nodeName"] = node
        state = (
            {"running": {}}
            if phase == "Running"
            else {"terminated": {"exitCode": 0, "reason": "Completed"}}
        )
        status["containerStatuses"] = [
            {"name": c["name"], "ready": phase == "Running", "state": state}
            for c in workload.containers
        ]
    else:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    return {"metadata": _meta(name, namespace, labels, owner), "spec": spec, "status": status}


def _requests(pod: Json) -> tuple[Decimal, Decimal]:
    """CPU and memory the scheduler counts for a pod (for the demo's placement)."""
    found = pod_requests(pod)
    zero = Quantity.parse("0")
    return found.get("cpu", zero).value, found.get("memory", zero).value


def generate(*, seed: int, pods: int, web_pods: int) -> World:
    """The whole demo cluster as Kubernetes JSON."""
    world = World()
    teams = {"default": "web", "shop": "commerce", "batch": "data", "kube-system": "platform"}
    for namespace, team in teams.items():
        world.add(
            NAMESPACES,
            {
                "metadata": _meta(
                    namespace, labels={"kubernetes.io/metadata.name": namespace, "team": team}
                ),
                "status": {"phase": "Active"},
            },
        )
    node_count = max(3, math.ceil(pods / PODS_PER_NODE))
    nodes = []
    for index in range(node_count):
        zone = "abc"[index % 3]
        name = f"node-{zone}-{index}"
        nodes.append(name)
        large = index % 2 == 0
        world.add(
            NODES,
            {
                "metadata": _meta(
                    name,
                    labels={
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "topology.kubernetes.io/zone": f"zone-{zone}",
                        "node.kubernetes.io/instance-type": "m5.2xlarge" if large else "m5.xlarge",
                    },
                ),
                "status": {
                    "allocatable": {
                        "cpu": "7910m" if large else "3920m",
                        "memory": "31Gi" if large else "15Gi",
                        "pods": "110",
                        "ephemeral-storage": "95Gi",
                        "nvidia.com/gpu": "4" if index % 3 == 2 else "0",
                    },
                    "addresses": [
                        {"type": "InternalIP", "address": f"10.0.{index // 250}.{index % 250 + 2}"},
                        {"type": "Hostname", "address": name},
                    ],
                },
            },
        )
    # First fit in round-robin order, as far as CPU and memory allow: a pod no node can take
    # stays Pending, like the real scheduler would leave it.
    free = {
        node["metadata"]["name"]: [
            float(Quantity.parse(node["status"]["allocatable"][r]).value) for r in ("cpu", "memory")
        ]
        for node in world.objects[NODES]
    }
    cursor = 0

    def place(pod: Json) -> str:
        nonlocal cursor
        wanted = [float(v) for v in _requests(pod)]
        for attempt in range(len(nodes)):
            node = nodes[(cursor + attempt) % len(nodes)]
            if all(w <= f for w, f in zip(wanted, free[node], strict=True)):
                free[node] = [f - w for w, f in zip(wanted, free[node], strict=True)]
                cursor = (cursor + attempt + 1) % len(nodes)
                return node
        return ""

    deployments = GroupResource("apps", "deployments")
    for workload in workloads(pods, web_pods):
        if workload.replicas == 0:
            continue
        ns, name = workload.namespace, workload.name
        if workload.kind == "Deployment":
            world.add(
                deployments,
                {
                    "metadata": _meta(name, ns, workload.labels),
                    "spec": {"replicas": workload.replicas},
                },
            )
            template_hash = suffix(seed, ns, name, "rs", length=10)
            rs_name = f"{name}-{template_hash}"
            labels = {**workload.labels, "pod-template-hash": template_hash}
            world.add(
                GroupResource("apps", "replicasets"),
                {
                    "metadata": _meta(rs_name, ns, labels, ("apps/v1", "Deployment", name)),
                    "spec": {"replicas": workload.replicas},
                },
            )
            owner = ("apps/v1", "ReplicaSet", rs_name)
            pod_names = [
                (f"{rs_name}-{suffix(seed, ns, name, i)}", labels) for i in range(workload.replicas)
            ]
        else:
            world.add(
                GroupResource("apps", "statefulsets"),
                {
                    "metadata": _meta(name, ns, workload.labels),
                    "spec": {"replicas": workload.replicas},
                },
            )
            owner = ("apps/v1", "StatefulSet", name)
            pod_names = [
                (
                    f"{name}-{i}",
                    {**workload.labels, "statefulset.kubernetes.io/pod-name": f"{name}-{i}"},
                )
                for i in range(workload.replicas)
            ]
        for pod_name, labels in pod_names:
            pod = _pod(pod_name, ns, labels, workload, node="", owner=owner)
            node = place(pod)
            if node:
                pod = _pod(pod_name, ns, labels, workload, node=node, owner=owner)
                world.node_of[(ns, pod_name)] = node
            world.add(PODS, pod)
    # Pods no node can take (KEP-1748 question 5), and a finished Job (Completed consumes nothing).
    huge = Workload(
        "batch",
        "Job",
        "reindex",
        2,
        {"app": "reindex"},
        (
            {
                "name": "reindex",
                "image": "registry.example/demo/reindex:1",
                "resources": resources({"cpu": "64", "memory": "256Gi"}),
            },
        ),
    )
    nightly = Workload(
        "batch",
        "Job",
        "nightly",
        2,
        {"app": "nightly"},
        (
            {
                "name": "nightly",
                "image": "registry.example/demo/nightly:1",
                "resources": resources({"cpu": "500m", "memory": "1Gi"}),
            },
        ),
    )
    jobs = GroupResource("batch", "jobs")
    for job, node_for, phase in (
        (huge, lambda i: "", "Pending"),
        (nightly, lambda i: nodes[i % len(nodes)], "Succeeded"),
    ):
        world.add(
            jobs,
            {
                "metadata": _meta(job.name, job.namespace, job.labels),
                "spec": {"parallelism": job.replicas},
            },
        )
        for index in range(job.replicas):
            pod_name = f"{job.name}-{suffix(seed, job.name, index)}"
            labels = {**job.labels, "job-name": job.name}
            world.add(
                PODS,
                _pod(
                    pod_name,
                    job.namespace,
                    labels,
                    job,
                    node=node_for(index),
                    owner=("batch/v1", "Job", job.name),
                    phase=phase,
                ),
            )
    return world
