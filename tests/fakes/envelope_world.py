"""A scalable fake cluster in its own process, for the envelope benchmarks (issue 17).

    python -m tests.fakes.envelope_world --pods 150000 --nodes 5000 --namespaces 3000 \
        --workloads 15000 --kubeconfig /tmp/kc --auth-kubeconfig /tmp/auth --plan /tmp/plan.json

A sibling of `tests.fakes.cluster_process` (which it leaves alone): the same fake kube-apiserver
(`tests.fakes.kube_apiserver`, the real list/watch wire: `limit`/`continue` pagination over a
consistent snapshot, bookmarks, 410s) holding a generated world, plus:

* **The world** (`plan_world`, deterministic): `--pods` pods on `--nodes` nodes in
  `--namespaces` namespaces, owned by `--workloads` workloads through ownerReferences:
  `--daemonsets` DaemonSets (one pod on every node, in `ns-0001`), Deployments -> ReplicaSets ->
  Pods, StatefulSets and Jobs. `ns-0000` is the big namespace (`--big-namespace-pods`, 3,000 by
  default, in Deployments of 30 pods); half of the other pods are in 30-pod Deployments (the
  HPA targets of the serving benchmark), the rest spread over the other workloads (10 %
  StatefulSets, 5 % Jobs, the rest Deployments). Pods are about 2.2 KB of JSON as
  kube-apiserver sends them (no managedFields), two containers each (`app`, `proxy`), placed
  round robin so every node holds pods/nodes of them.
* **Fake kubelets** for every node behind the API server's node proxy
  (`/api/v1/nodes/{node}/proxy/metrics/resource`): the kubelet's exact text as
  `custom_metrics_server.kubelet_format.writer` writes it (container cpu, working set, start
  time and swap; pod cpu, working set and swap; node cpu, working set and swap), with counters
  that move: every node's stats are refreshed every `--stats-period` seconds (as the kubelet's
  housekeeping does; each node at its own phase) and the body rendered from a per-node template
  of the writer's own lines (`KubeletFarm`; `--check-template` compares it with the writer).
* **Accounting per client**: every request and every byte the fake sends, per bearer token
  (one token per replica: `--replicas N` writes `kubeconfig-<i>` files) and per kind (list,
  watch, proxy, get, discovery), for the scale-out figures.
* **A command channel** on stdin, one command a line, one answer line on stdout each:
  `stream RATE` (pod MODIFIED events at RATE/s, status updates as the kubelet makes them;
  `stream 0` stops), `stats` (`stats {json}`: accounting, events sent, this process's CPU),
  `reset` (zero the accounting), `compact`, `quit` (or EOF).

It prints `ready <url>` once the world is loaded and the kubeconfigs (and `--plan`, the JSON
the benchmarks read: HPA targets, the big namespace) are written.

Runs on uvloop when it is installed (the fake's own loop; `--loop asyncio` to compare). The
world process is one GIL: the API server, the kubelet answers and the event stream share one
core at most (the auth fake runs in a child process of its own, `--auth-only`, so reviews do
not queue behind list pages); `stats` reports its CPU so a benchmark can tell when the fake,
not the server, is the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import gzip
import hashlib
import json
import os
import random
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Summary,
    SwapStats,
)
from custom_metrics_server.kubelet_format.writer import render_resource_metrics
from custom_metrics_server.resources.exposition import format_go_float
from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.cluster_process import TOKEN, write_kubeconfig
from tests.fakes.kube_apiserver import FakeKubeApiServer

__all__ = [
    "TOKEN",
    "EnvelopeApiServer",
    "KubeletFarm",
    "WorldPlan",
    "WorldShape",
    "make_pod",
    "plan_world",
    "scale_shape",
]

Obj = dict[str, Any]
CONTAINERS = ("app", "proxy")
STARTED = "2026-11-20T10:00:00Z"
#: The epoch second the world's containers started (counters grow from here).
START_EPOCH = 1_795_600_000


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def namespace_name(index: int) -> str:
    return f"ns-{index:04d}"


@dataclass(frozen=True)
class WorldShape:
    pods: int
    nodes: int
    namespaces: int
    workloads: int
    big_namespace_pods: int = 3000
    daemonsets: int = 2
    hpa_pods: int = 30  # pods of an HPA-target Deployment


def scale_shape(pods: int) -> WorldShape:
    """The issue's proportions (150,000 pods: 5,000 nodes, 3,000 namespaces, 15,000 workloads)
    at another pod count."""
    return WorldShape(
        pods=pods,
        nodes=max(2, round(pods / 30)),
        namespaces=max(3, round(pods / 50)),
        workloads=max(6, round(pods / 10)),
        big_namespace_pods=min(3000, pods // 4),
    )


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str  # Deployment, StatefulSet, DaemonSet, Job
    namespace: str
    name: str
    pods: int  # 0 for a DaemonSet: one per node
    uid: str

    @property
    def template_hash(self) -> str:
        return hashlib.sha1(self.name.encode()).hexdigest()[:10]

    @property
    def resource(self) -> str:
        return {
            "Deployment": "deployments.apps",
            "StatefulSet": "statefulsets.apps",
            "DaemonSet": "daemonsets.apps",
            "Job": "jobs.batch",
        }[self.kind]


@dataclass
class WorldPlan:
    shape: WorldShape
    workloads: list[Workload]
    #: per pod: (workload index, ordinal in workload, node index)
    pods: list[tuple[int, int, int]] = field(default_factory=list)

    def pod_name(self, workload: Workload, ordinal: int, node: int) -> str:
        if workload.kind == "Deployment":
            return f"{workload.name}-{workload.template_hash}-{ordinal:05d}"
        if workload.kind == "StatefulSet":
            return f"{workload.name}-{ordinal}"
        if workload.kind == "DaemonSet":
            return f"{workload.name}-{node:05d}"
        return f"{workload.name}-{ordinal:05d}"

    def pods_by_node(self) -> list[list[tuple[str, str]]]:
        """Per node, the (namespace, name) of its pods."""
        out: list[list[tuple[str, str]]] = [[] for _ in range(self.shape.nodes)]
        for wi, ordinal, node in self.pods:
            w = self.workloads[wi]
            out[node].append((w.namespace, self.pod_name(w, ordinal, node)))
        return out

    def hpa_targets(self, count: int = 5000, seed: int = 17) -> list[dict[str, str]]:
        """`count` HPAs: half Pods metrics over a 30-pod Deployment's pods (by `app=`), half
        Object metrics on a workload; round robin over the candidates, then shuffled."""
        thirty = [
            w for w in self.workloads if w.kind == "Deployment" and w.pods == self.shape.hpa_pods
        ]
        objects = [w for w in self.workloads if w.kind in ("Deployment", "StatefulSet")]
        targets: list[dict[str, str]] = []
        for i in range(count):
            if i % 2 == 0 and thirty:
                w = thirty[(i // 2) % len(thirty)]
                targets.append(
                    {"type": "pods", "namespace": w.namespace, "selector": f"app={w.name}"}
                )
            else:
                w = objects[(i // 2) % len(objects)]
                targets.append(
                    {
                        "type": "object",
                        "namespace": w.namespace,
                        "resource": w.resource,
                        "name": w.name,
                    }
                )
        random.Random(seed).shuffle(targets)
        return targets


def plan_world(shape: WorldShape) -> WorldPlan:
    """The workloads and where every pod goes (deterministic)."""
    s = shape
    workloads: list[Workload] = []

    def add(kind: str, namespace: str, name: str, pods: int) -> None:
        uid = f"{len(workloads):08x}-0000-4000-8000-{kind[:4].lower():0>12}"[-36:]
        workloads.append(Workload(kind, namespace, name, pods, uid))

    daemon_pods = s.daemonsets * s.nodes
    for d in range(s.daemonsets):
        add("DaemonSet", namespace_name(1 % s.namespaces), f"node-daemon-{d}", 0)
    big = min(s.big_namespace_pods, max(0, s.pods - daemon_pods))
    for i in range(big // s.hpa_pods):
        add("Deployment", namespace_name(0), f"big-{i:04d}", s.hpa_pods)
    rest = max(0, s.pods - daemon_pods - (big // s.hpa_pods) * s.hpa_pods)
    remaining_workloads = max(1, s.workloads - len(workloads))
    thirty = min(rest // 2 // s.hpa_pods, remaining_workloads // 2)
    other_pods = rest - thirty * s.hpa_pods
    other = max(1, remaining_workloads - thirty)
    spread = max(1, s.namespaces - 1)
    index = 0

    def next_namespace() -> str:
        nonlocal index
        index += 1
        return namespace_name(1 + (index % spread)) if s.namespaces > 1 else namespace_name(0)

    for i in range(thirty):
        add("Deployment", next_namespace(), f"web-{i:05d}", s.hpa_pods)
    kinds = [
        "StatefulSet" if i % 20 in (1, 11) else "Job" if i % 20 == 5 else "Deployment"
        for i in range(other)
    ]
    jobs = kinds.count("Job")
    job_size = min(3, other_pods // max(1, other))
    spread_pods = other_pods - jobs * job_size
    base, extra = divmod(spread_pods, max(1, other - jobs))
    placed = 0
    for i, kind in enumerate(kinds):
        if kind == "Job":
            size = job_size
        else:
            size = base + (1 if placed < extra else 0)
            placed += 1
        add(kind, next_namespace(), f"svc-{i:05d}", size)
    plan = WorldPlan(shape, workloads)
    slot = 0
    for wi, w in enumerate(workloads):
        if w.kind == "DaemonSet":
            plan.pods.extend((wi, n, n) for n in range(s.nodes))
            continue
        for ordinal in range(w.pods):
            plan.pods.append((wi, ordinal, slot % s.nodes))
            slot += 1
    return plan


# ---------------------------------------------------------------------- JSON documents


def _owner(api_version: str, kind: str, name: str, uid: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _labels(w: Workload) -> dict[str, str]:
    labels = {"app": w.name, "team": w.namespace, "tier": "backend"}
    if w.kind == "Deployment":
        labels["pod-template-hash"] = w.template_hash
    return labels


def make_pod(plan: WorldPlan, index: int) -> Obj:
    """Pod `index` of the plan as kube-apiserver sends it (no managedFields), ~2.2 KB."""
    wi, ordinal, node = plan.pods[index]
    w = plan.workloads[wi]
    name = plan.pod_name(w, ordinal, node)
    if w.kind == "Deployment":
        owner = _owner("apps/v1", "ReplicaSet", f"{w.name}-{w.template_hash}", "rs-" + w.uid[3:])
    elif w.kind == "Job":
        owner = _owner("batch/v1", "Job", w.name, w.uid)
    else:
        owner = _owner("apps/v1", w.kind, w.name, w.uid)
    ip = f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": name.rsplit("-", 1)[0] + "-",
            "namespace": w.namespace,
            "uid": f"{index:08x}-1c2d-4e5f-8a9b-{wi:012x}",
            "creationTimestamp": "2026-11-20T09:59:58Z",
            "labels": _labels(w),
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-19T08:00:00Z",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [owner],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{w.name}:v1.{wi % 20}.3",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "proxy",
                    "image": "registry.example.com/envoy:v1.31.0",
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "128Mi"},
                    },
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "restartPolicy": "Never" if w.kind == "Job" else "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": node_name(node),
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "priority": 0,
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": STARTED,
                }
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": f"10.255.{node >> 8 & 255}.{node & 255}",
            "podIP": ip,
            "startTime": STARTED,
            "containerStatuses": [
                {
                    "name": container,
                    "ready": True,
                    "restartCount": 0,
                    "image": f"registry.example.com/{container}:v1",
                    "containerID": f"containerd://{index:032x}{i:032x}",
                    "started": True,
                    "state": {"running": {"startedAt": STARTED}},
                }
                for i, container in enumerate(CONTAINERS)
            ],
            "qosClass": "Burstable",
        },
    }


def _template(w: Workload) -> Obj:
    return {
        "metadata": {"labels": _labels(w)},
        "spec": {
            "containers": [
                {"name": "app", "image": f"registry.example.com/{w.name}:v1", "resources": {}},
                {"name": "proxy", "image": "registry.example.com/envoy:v1.31.0"},
            ]
        },
    }


def workload_objects(plan: WorldPlan) -> Iterator[tuple[str, Obj]]:
    """(resource, object) for every workload and ReplicaSet of the plan."""
    nodes = plan.shape.nodes
    for w in plan.workloads:
        selector = {"matchLabels": {"app": w.name}}
        meta = {
            "name": w.name,
            "namespace": w.namespace,
            "uid": w.uid,
            "creationTimestamp": "2026-11-20T09:59:00Z",
            "labels": {"app": w.name},
            "generation": 1,
        }
        replicas = nodes if w.kind == "DaemonSet" else w.pods
        if w.kind == "Deployment":
            yield (
                "deployments.apps",
                {
                    "kind": "Deployment",
                    "apiVersion": "apps/v1",
                    "metadata": meta,
                    "spec": {"replicas": replicas, "selector": selector, "template": _template(w)},
                    "status": {"replicas": replicas, "readyReplicas": replicas},
                },
            )
            rs_meta = {
                **meta,
                "name": f"{w.name}-{w.template_hash}",
                "uid": "rs-" + w.uid[3:],
                "labels": _labels(w),
                "ownerReferences": [_owner("apps/v1", "Deployment", w.name, w.uid)],
            }
            yield (
                "replicasets.apps",
                {
                    "kind": "ReplicaSet",
                    "apiVersion": "apps/v1",
                    "metadata": rs_meta,
                    "spec": {"replicas": replicas, "selector": selector, "template": _template(w)},
                    "status": {"replicas": replicas, "readyReplicas": replicas},
                },
            )
        elif w.kind == "Job":
            yield (
                "jobs.batch",
                {
                    "kind": "Job",
                    "apiVersion": "batch/v1",
                    "metadata": meta,
                    "spec": {
                        "parallelism": replicas,
                        "completions": replicas,
                        "template": _template(w),
                    },
                    "status": {"active": replicas},
                },
            )
        else:
            resource = "statefulsets.apps" if w.kind == "StatefulSet" else "daemonsets.apps"
            yield (
                resource,
                {
                    "kind": w.kind,
                    "apiVersion": "apps/v1",
                    "metadata": meta,
                    "spec": {"replicas": replicas, "selector": selector, "template": _template(w)},
                    "status": {"replicas": replicas, "readyReplicas": replicas},
                },
            )


def make_node(index: int) -> Obj:
    name = node_name(index)
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"{index:08x}-0000-4000-8000-00000000node",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/zone": f"zone-{index % 3}",
            },
        },
        "spec": {"podCIDR": f"10.{index >> 8 & 255}.{index & 255}.0/24"},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110"},
            "addresses": [
                {"type": "InternalIP", "address": f"10.255.{index >> 8 & 255}.{index & 255}"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.33.2",
                "containerRuntimeVersion": "containerd://2.0.5",
            },
        },
    }


# ---------------------------------------------------------------------- fake kubelets


class _NodeKubelet:
    """One node's `/metrics/resource`: a template of the writer's lines plus moving values.

    The counters at stats tick `tick` (stamped `time_ns`): container CPU grows at a per-container
    rate since the container started (plus a little per tick), working sets wander, swap is 0;
    a pod is the sum of its containers plus a little; the node the sum of its pods plus the
    system's share."""

    __slots__ = ("index", "order_c", "order_p", "parts", "pods", "rates", "start_ns", "start_text")

    def __init__(self, index: int, pods: list[tuple[str, str]]) -> None:
        self.index = index
        self.pods = pods
        rng = random.Random(index)
        # per pod, per container: (cpu rate ns/s, working set base bytes)
        self.rates = [
            [
                (rng.randint(5, 400) * 1_000_000, rng.randint(20, 400) * 1_048_576)
                for _ in CONTAINERS
            ]
            for _ in pods
        ]
        self.start_ns = (START_EPOCH - rng.randint(0, 86_400)) * 1_000_000_000
        self.start_text = format_go_float(float(self.start_ns) / 1e9)
        # the writer's series order: containers by (container, namespace, pod), pods by key
        self.order_c = sorted(
            range(len(pods) * len(CONTAINERS)),
            key=lambda k: (CONTAINERS[k % 2], *pods[k // 2]),
        )
        self.order_p = sorted(range(len(pods)), key=lambda k: pods[k])
        self.parts: list[tuple[str, str]] | None = None

    def _numbers(
        self, tick: int, time_ns: int
    ) -> tuple[list[int], list[int], list[int], list[int], int, int]:
        """Container cpu and memory (flat, pod-major), pod cpu and memory, node cpu, memory."""
        elapsed = max(0, time_ns - self.start_ns) // 1_000_000_000
        wobble_cpu, wobble_mem = tick * 7_919, (tick * 4096) % 8_388_608
        c_cpu = [rate * elapsed + wobble_cpu for pod in self.rates for rate, _ in pod]
        c_mem = [base + wobble_mem for pod in self.rates for _, base in pod]
        overhead = 1_000_000 * elapsed // 100
        p_cpu = [c_cpu[2 * i] + c_cpu[2 * i + 1] + overhead for i in range(len(self.pods))]
        p_mem = [c_mem[2 * i] + c_mem[2 * i + 1] + 2_097_152 for i in range(len(self.pods))]
        return (
            c_cpu,
            c_mem,
            p_cpu,
            p_mem,
            sum(p_cpu) + 500_000_000 * elapsed,
            sum(p_mem) + 1_610_612_736,
        )

    def summary(self, tick: int, time_ns: int) -> Summary:
        """The same stats as the kubelet's Summary, for the writer itself."""
        c_cpu, c_mem, p_cpu, p_mem, n_cpu, n_mem = self._numbers(tick, time_ns)
        pods: list[PodStats] = []
        for i, (namespace, name) in enumerate(self.pods):
            containers = tuple(
                ContainerStats(
                    container,
                    self.start_ns,
                    CpuStats(c_cpu[2 * i + j], time_ns),
                    MemoryStats(c_mem[2 * i + j], time_ns),
                    SwapStats(0, None, time_ns),
                )
                for j, container in enumerate(CONTAINERS)
            )
            pods.append(
                PodStats(
                    namespace,
                    name,
                    CpuStats(p_cpu[i], time_ns),
                    MemoryStats(p_mem[i], time_ns),
                    SwapStats(0, None, time_ns),
                    containers,
                )
            )
        node = NodeStats(
            CpuStats(n_cpu, time_ns), MemoryStats(n_mem, time_ns), SwapStats(0, None, time_ns)
        )
        return Summary(node, tuple(pods))

    def render_exact(self, tick: int, time_ns: int) -> bytes:
        """The body through the kubelet writer itself (the reference; ~0.8 ms a node)."""
        return render_resource_metrics(self.summary(tick, time_ns))

    def render(self, tick: int, time_ns: int) -> bytes:
        """The same body from the template: the writer's own lines (built once per node)
        with only the values and timestamps replaced; `--check-template` proves them equal."""
        if self.parts is None:
            self.parts = self._build_template(self.summary(tick, time_ns))
        fmt = format_go_float
        c_cpu, c_mem, p_cpu, p_mem, n_cpu, n_mem = self._numbers(tick, time_ns)
        values: list[str] = [fmt(c_cpu[k] / 1e9) for k in self.order_c]
        values += [fmt(float(c_mem[k])) for k in self.order_c]
        values += [self.start_text] * len(self.order_c)
        values += ["0"] * len(self.order_c)
        values += [fmt(n_cpu / 1e9), fmt(float(n_mem)), "0"]
        values += [fmt(p_cpu[k] / 1e9) for k in self.order_p]
        values += [fmt(float(p_mem[k])) for k in self.order_p]
        values += ["0"] * len(self.order_p)
        stamp = f" {time_ns // 1_000_000}\n"
        it = iter(values)
        out = [
            prefix if kind == "" else prefix + next(it) + ("\n" if kind == "start" else stamp)
            for prefix, kind in self.parts
        ]
        return "".join(out).encode()

    @staticmethod
    def _build_template(summary: Summary) -> list[tuple[str, str]]:
        """Split the writer's output into fixed prefixes and value slots."""
        text = render_resource_metrics(summary).decode()
        parts: list[tuple[str, str]] = []
        for line in text.splitlines(keepends=True):
            if line.startswith(("#", "scrape_error", "resource_scrape_error")):
                parts.append((line, ""))
            elif line.startswith("container_start_time_seconds"):
                parts.append((line.rstrip("\n").rsplit(" ", 1)[0] + " ", "start"))
            else:
                parts.append((line.rstrip("\n").rsplit(" ", 2)[0] + " ", "value"))
        return parts


class KubeletFarm:
    """Every node's kubelet: stats refreshed every `period` s at a per-node phase."""

    def __init__(self, plan: WorldPlan, *, period: float = 10.0) -> None:
        self.period = period
        self.nodes = {
            node_name(i): _NodeKubelet(i, pods) for i, pods in enumerate(plan.pods_by_node())
        }
        self.rendered = 0

    def _stamp(self, kubelet: _NodeKubelet, now: float) -> tuple[int, int]:
        phase = (kubelet.index * 0.618034 % 1.0) * self.period
        tick = int((now - phase) // self.period)
        time_ns = int((tick * self.period + phase) * 1e9)
        return tick, time_ns

    def body(self, node: str, now: float | None = None) -> bytes | None:
        kubelet = self.nodes.get(node)
        if kubelet is None:
            return None
        tick, time_ns = self._stamp(kubelet, time.time() if now is None else now)
        self.rendered += 1
        return kubelet.render(tick, time_ns)

    def exact_body(self, node: str, now: float) -> bytes:
        kubelet = self.nodes[node]
        tick, time_ns = self._stamp(kubelet, now)
        return kubelet.render_exact(tick, time_ns)


# ---------------------------------------------------------------------- the API server


_CURRENT: contextvars.ContextVar[tuple[str, str, bool]] = contextvars.ContextVar(
    "envelope_client", default=("-", "other", False)
)
#: kube-apiserver gzips (level 1) non-watch responses over 128 KiB for clients that accept it
#: (APIResponseCompression); the kubelet's promhttp handler gzips /metrics/resource (default
#: level) and the node proxy passes it through.
GZIP_MIN_BYTES = 128 * 1024


@dataclass
class _Traffic:
    requests: int = 0
    bytes: int = 0


class EnvelopeApiServer(FakeKubeApiServer):
    """The fake kube-apiserver with fake kubelets behind its node proxy and traffic counted
    per client (bearer token) and kind. Everything else is `FakeKubeApiServer` unchanged."""

    def __init__(
        self, farm: KubeletFarm | None = None, *, gzip: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.farm = farm
        self.gzip = gzip
        self.traffic: dict[str, dict[str, _Traffic]] = defaultdict(lambda: defaultdict(_Traffic))
        self.first_request: dict[str, float] = {}
        self.proxy_by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    @staticmethod
    def _client(headers: Mapping[str, str]) -> str:
        auth = headers.get("authorization", "")
        token = auth.removeprefix("Bearer ").strip()
        return token or "anonymous"

    async def _dispatch(self, request: Any, reader: Any, writer: Any) -> bool:
        client = self._client(request.headers)
        kind = self._route(request)[0]
        accepts = "gzip" in request.headers.get("accept-encoding", "")
        _CURRENT.set((client, kind, self.gzip and accepts))
        self.first_request.setdefault(client, time.time())
        self.traffic[client][kind].requests += 1
        if kind == "proxy":
            node = request.path.split("/")[4] if request.path.count("/") >= 4 else ""
            self.proxy_by_node[client][node] += 1
        return await super()._dispatch(request, reader, writer)

    def _account(self, size: int) -> None:
        client, kind, _ = _CURRENT.get()
        self.traffic[client][kind].bytes += size

    async def _respond(
        self, writer: Any, code: int, body: bytes, content_type: str = "application/json"
    ) -> bool:
        _, kind, gzip_ok = _CURRENT.get()
        if gzip_ok and (kind == "proxy" or len(body) >= GZIP_MIN_BYTES):
            body = gzip.compress(body, compresslevel=6 if kind == "proxy" else 1, mtime=0)
            head = self._head(
                code,
                [
                    ("Content-Type", content_type),
                    ("Content-Encoding", "gzip"),
                    ("Content-Length", str(len(body))),
                ],
            )
            self._account(len(head) + len(body))
            writer.write(head + body)
            await writer.drain()
            return True
        self._account(len(body) + 120)  # + the head, about 120 bytes
        return await super()._respond(writer, code, body, content_type)

    def _write_chunk(self, writer: Any, data: bytes) -> None:  # type: ignore[override]
        self._account(len(data))
        FakeKubeApiServer._write_chunk(writer, data)

    async def _serve_proxy(self, writer: Any, node_name: str, path: str) -> bool:
        if self.farm is not None and path == "metrics/resource":
            body = self.farm.body(node_name)
            if body is not None:
                return await self._respond(
                    writer, 200, body, "text/plain; version=0.0.4; charset=utf-8"
                )
        return await super()._serve_proxy(writer, node_name, path)

    def traffic_report(self) -> dict[str, Any]:
        nodes = len(self.farm.nodes) if self.farm else 0
        out: dict[str, Any] = {}
        for client, kinds in list(self.traffic.items()):
            by_node = self.proxy_by_node.get(client, {})
            out[client] = {
                "first_request": self.first_request.get(client),
                "kinds": {k: {"requests": t.requests, "bytes": t.bytes} for k, t in kinds.items()},
                "requests": sum(t.requests for t in kinds.values()),
                "bytes": sum(t.bytes for t in kinds.values()),
                "proxy_nodes_seen": len(by_node),
                "proxy_max_per_node": max(by_node.values(), default=0),
                "nodes": nodes,
            }
        return out

    def reset_traffic(self) -> None:
        self.traffic.clear()
        self.proxy_by_node.clear()
        self.first_request.clear()
        self.reset_counts()


# ---------------------------------------------------------------------- the event stream


class EventStream:
    """Pod MODIFIED events at a steady rate: status updates (a container restart count, the
    Ready condition's transition time), labels and resources unchanged, as most pod updates
    at scale are. Batches every 10 ms; compacts the history every 10 s."""

    def __init__(self, api: EnvelopeApiServer, keys: list[tuple[str, str]]) -> None:
        self.api = api
        self.keys = keys
        self.rate = 0.0
        self.sent = 0
        self.behind = 0.0
        self._position = 0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-stream", daemon=True)
        self._thread.start()

    def set_rate(self, rate: float) -> None:
        self.rate = rate
        self._wake.set()

    def _modified(self, stored: Obj, n: int) -> Obj:
        status = dict(stored["status"])
        statuses = [dict(c) for c in status["containerStatuses"]]
        statuses[n % 2]["restartCount"] = statuses[n % 2].get("restartCount", 0) + 1
        status["containerStatuses"] = statuses
        conditions = [dict(c) for c in status["conditions"]]
        conditions[1]["lastTransitionTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status["conditions"] = conditions
        return {**stored, "status": status}

    def _run(self) -> None:
        last_compact = time.monotonic()
        while True:
            if self.rate <= 0:
                self._wake.wait()
                self._wake.clear()
                continue
            started = time.monotonic()
            due = 0.0
            tick = started
            while self.rate > 0:
                now = time.monotonic()
                due += (now - tick) * self.rate
                tick = now
                count = int(due)
                if count:
                    due -= count
                    batch: list[Obj] = []
                    with self.api._lock:
                        pods = self.api._objects.get("pods", {})
                        for _ in range(count):
                            key = self.keys[self._position % len(self.keys)]
                            self._position += 1
                            stored = pods.get(key)
                            if stored is not None:
                                batch.append(self._modified(stored, self._position))
                    self.api.apply_many("pods", batch, mode="update", copies=False)
                    self.sent += len(batch)
                self.behind = due
                if now - last_compact > 10:
                    self.api.compact()
                    last_compact = now
                time.sleep(max(0.0, 0.01 - (time.monotonic() - now)))


# ---------------------------------------------------------------------- the process


def load_world(api: EnvelopeApiServer, plan: WorldPlan) -> list[tuple[str, str]]:
    """Every object of the plan into the fake; the history is compacted afterwards (a
    long-running cluster's watch cache holds no history from its first day)."""
    s = plan.shape
    api.apply_many(
        "namespaces",
        (
            {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": namespace_name(i)}}
            for i in range(s.namespaces)
        ),
        copies=False,
    )
    api.apply_many("nodes", (make_node(i) for i in range(s.nodes)), copies=False)
    by_resource: dict[str, list[Obj]] = defaultdict(list)
    for resource, obj in workload_objects(plan):
        by_resource[resource].append(obj)
    for resource, objs in by_resource.items():
        api.apply_many(resource, objs, copies=False)
    keys: list[tuple[str, str]] = []

    def pods() -> Iterator[Obj]:
        for i in range(len(plan.pods)):
            pod = make_pod(plan, i)
            keys.append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            yield pod

    api.apply_many("pods", pods(), copies=False)
    api.compact()
    return keys


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def serve_auth(kubeconfig: Path) -> int:
    """`--auth-only`: the TokenReview/SubjectAccessReview fake alone (everything allowed,
    `TOKEN` authenticates as `tester`), answering `stats` on stdin with its review counts."""
    auth = FakeAuthApiServer()
    auth.tokens[TOKEN] = {"username": "tester", "groups": ["system:authenticated"]}
    auth.allow_all = True
    auth.up()
    auth.write_kubeconfig(kubeconfig)
    print("ready", flush=True)
    counts = {"token_reviews": 0, "access_reviews": 0}
    for line in sys.stdin:
        if line.strip() == "stats":
            with auth.lock:  # count and forget: the fake keeps every body it received
                counts["token_reviews"] += len(auth.token_reviews)
                counts["access_reviews"] += len(auth.access_reviews)
                auth.token_reviews.clear()
                auth.access_reviews.clear()
                auth.authorizations.clear()
            print(json.dumps({**counts, "cpu_seconds": _cpu_seconds()}), flush=True)
        elif line.strip() == "quit":
            break
    auth.down()
    return 0


class AuthProcess:
    """The auth fake in its own process: its reviews do not wait on the world's GIL (a real
    kube-apiserver answers them from other cores)."""

    def __init__(self, kubeconfig: Path) -> None:
        import subprocess  # noqa: PLC0415

        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes.envelope_world", "--auth-only",
             f"--auth-kubeconfig={kubeconfig}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the auth fake did not start: {line!r}")
        self._lock = threading.Lock()

    def stats(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        with self._lock:
            self.process.stdin.write("stats\n")
            self.process.stdin.flush()
            answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):
            self.process.stdin.write("quit\n")
            self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()
            self.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--namespaces", type=int)
    parser.add_argument("--workloads", type=int)
    parser.add_argument("--big-namespace-pods", type=int)
    parser.add_argument("--daemonsets", type=int, default=2)
    parser.add_argument("--stats-period", type=float, default=10.0)
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--auth-kubeconfig", type=Path)
    parser.add_argument(
        "--replicas", type=int, default=1, help="kubeconfig-<i> files, one token each"
    )
    parser.add_argument("--plan", type=Path, help="write the HPA targets and shape here (JSON)")
    parser.add_argument("--hpas", type=int, default=5000)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument(
        "--gzip",
        action="store_true",
        help="gzip list pages over 128 KiB and kubelet answers for clients that accept it, "
        "as kube-apiserver and the kubelet do (off: every byte counted uncompressed)",
    )
    parser.add_argument(
        "--check-template", action="store_true", help="template == writer, then exit"
    )
    parser.add_argument("--auth-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.auth_only:
        return serve_auth(args.auth_kubeconfig)
    default = scale_shape(args.pods)
    shape = WorldShape(
        pods=args.pods,
        nodes=args.nodes or default.nodes,
        namespaces=args.namespaces or default.namespaces,
        workloads=args.workloads or default.workloads,
        big_namespace_pods=(
            default.big_namespace_pods
            if args.big_namespace_pods is None
            else args.big_namespace_pods
        ),
        daemonsets=args.daemonsets,
    )
    if args.loop == "uvloop":
        try:
            import uvloop  # noqa: PLC0415

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    started = time.monotonic()
    plan = plan_world(shape)
    farm = KubeletFarm(plan, period=args.stats_period)
    if args.check_template:
        now = time.time()
        for name in list(farm.nodes)[:3]:
            assert farm.body(name, now) == farm.exact_body(name, now), name
        print("template ok", flush=True)
        return 0
    if args.kubeconfig is None:
        parser.error("--kubeconfig is required")
    api = EnvelopeApiServer(farm, gzip=args.gzip)
    keys = load_world(api, plan)
    api.start()
    write_kubeconfig(args.kubeconfig, api.url)
    for replica in range(args.replicas):
        path = args.kubeconfig.with_name(f"{args.kubeconfig.name}-{replica}")
        write_kubeconfig(path, api.url)
        text = path.read_text()
        import yaml  # noqa: PLC0415

        config = yaml.safe_load(text)
        config["users"][0]["user"]["token"] = f"replica-{replica}"
        path.write_text(yaml.safe_dump(config))
    auth: AuthProcess | None = None
    if args.auth_kubeconfig is not None:
        auth = AuthProcess(args.auth_kubeconfig)
    if args.plan is not None:
        pods_in = defaultdict(int)
        for wi, _, _ in plan.pods:
            pods_in[plan.workloads[wi].namespace] += 1
        document = {
            "shape": shape.__dict__,
            "big_namespace": namespace_name(0),
            "big_namespace_pods": pods_in[namespace_name(0)],
            "pods": len(plan.pods),
            "workloads": {
                kind: sum(1 for w in plan.workloads if w.kind == kind)
                for kind in ("Deployment", "StatefulSet", "DaemonSet", "Job")
            },
            "objects": {r: len(api._objects.get(r, {})) for r in api._by_key},
            "hpa_targets": plan.hpa_targets(args.hpas),
            "load_seconds": round(time.monotonic() - started, 2),
        }
        args.plan.write_text(json.dumps(document))
    stream = EventStream(api, keys)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"ready {api.url}", flush=True)

    def commands() -> None:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "stream":
                stream.set_rate(float(words[1]))
                print(f"ok stream {stream.rate:g}", flush=True)
            elif words[0] == "stats":
                report = {
                    "time": time.time(),
                    "cpu_seconds": _cpu_seconds(),
                    "events_sent": stream.sent,
                    "events_behind": stream.behind,
                    "rate": stream.rate,
                    "resource_version": api.resource_version,
                    "watches": api.active_watches(),
                    "kubelet_bodies": farm.rendered,
                    "auth": auth.stats() if auth is not None else None,
                    "clients": api.traffic_report(),
                }
                print("stats " + json.dumps(report), flush=True)
            elif words[0] == "reset":
                api.reset_traffic()
                print("ok reset", flush=True)
            elif words[0] == "compact":
                api.compact()
                print("ok compact", flush=True)
            elif words[0] == "quit":
                break
            else:
                print(f"error unknown command {words[0]!r}", flush=True)
        done.set()

    threading.Thread(target=commands, daemon=True).start()
    done.wait()
    stream.set_rate(0)
    if auth is not None:
        auth.close()
    api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
