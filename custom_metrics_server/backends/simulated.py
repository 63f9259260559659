"""The embedded demo: a deterministic cluster whose application metrics move over time.

`SimulatedCluster` generates, from a seed, namespaces, nodes, Deployments with their
ReplicaSets, a StatefulSet, Services, Ingresses and Pods with realistic labels, and publishes a
new value snapshot every `interval` seconds (the sample timestamps are those tick times, so
freshness is real). Values follow a smooth daily-like wave per object plus deterministic
jitter, so the same seed and time always give the same numbers.

Metrics (every HPA source type has one):

* Pods: `pods/http_requests_per_second` (series by `method`, window 60 s),
  `pods/memory_working_set_bytes`.
* Object: `deployments.apps`, `statefulsets.apps`, `replicasets.apps`, `services` and
  `namespaces` `http_requests_per_second` (sums over their pods),
  `ingresses.networking.k8s.io/requests_per_second`, `nodes/node_load1`,
  `namespaces/queue_length` (the `/namespaces/{ns}/metrics/{metric}` form).
* External: `queue_depth` (series by `queue`, per namespace) and the cluster-wide
  `cluster_requests_per_second`.

Cost: a tick is O(pods x series) and runs off the request path; requests read the published
snapshot (see `memory.MemoryBackend`).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Self

from custom_metrics_server.backends import demo_kubelets, demo_world
from custom_metrics_server.backends.demo_world import crc as _hash
from custom_metrics_server.backends.demo_world import unit as _unit
from custom_metrics_server.backends.memory import (
    MemoryBackend,
    Snapshot,
    SnapshotBuilder,
)
from custom_metrics_server.cluster_state.records import PODS, ClusterState
from custom_metrics_server.domain import GroupResource, MetricInfo, ObjectKey, Readiness
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.runtime.heap import settle_heap
from custom_metrics_server.runtime.tasks import BackgroundTasks, drain, run_cooperatively
from custom_metrics_server.usage.store import UsageStore


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """Size and pace of the simulated cluster."""

    seed: int = 42
    pods: int = 60
    web_pods: int | None = None  # replicas of default/web; None: a fifth of the pods
    interval: float = 15.0

    def web_replicas(self) -> int:
        """Replicas of the `default/web` Deployment (the HPA Pods example)."""
        wanted = self.web_pods if self.web_pods is not None else max(2, self.pods // 5)
        return max(0, min(wanted, self.pods))


def _wave(base: float, phase: float, tick: int, jitter: float) -> float:
    """base x a slow wave (period 240 ticks) x up to +-5% jitter, to 3 decimals."""
    wave = 1 + 0.35 * math.sin(2 * math.pi * tick / 240 + phase)
    return round(base * wave * (1 + 0.1 * (jitter - 0.5)), 3)


class SimulatedCluster(MemoryBackend):
    """The `--demo` world: `.cluster` is its cluster view, the instance its metrics backend."""

    def __init__(
        self, settings: DemoSettings | None = None, *, clock: Callable[[], float] = time.time
    ):
        super().__init__(name="simulated")
        self.settings = settings or DemoSettings()
        self.cluster = ClusterState()
        self._clock = clock
        self._tasks = BackgroundTasks()
        self.world = demo_world.generate(
            seed=self.settings.seed, pods=self.settings.pods, web_pods=self.settings.web_replicas()
        )
        self._load_world()
        seed = self.settings.seed
        self._pod_params = [
            (
                key,
                5 + 45 * _unit(seed, key, "base"),
                _unit(seed, key, "phase") * 2 * math.pi,
                0.7 + 0.2 * _unit(seed, key, "get"),
                (64 + int(448 * _unit(seed, key, "mem"))) * 2**20,
            )
            for key in self._running
        ]
        self.usage = UsageStore(metric_resolution=self.settings.interval)
        self._usage = self._usage_plan()
        self._cpu_seconds: dict[tuple[ObjectKey, str], float] = {}
        self._last_scrape = 0.0
        self.tick()
        # Two scrapes, one interval apart: usage (a rate) needs two samples of each counter.
        # At tick boundaries, so that every process (`serve --workers`) computes the same rates.
        now = self._tick_start(self._clock())
        self.scrape(now - self.settings.interval)
        self.scrape(now)
        settle_heap()  # the world itself is static from here on

    def _load_world(self) -> None:
        """Feed the generated JSON through the same sinks the Kubernetes watches use."""
        self.cluster.load(self.world.objects)
        state = self.cluster
        self._running = sorted(k for k, pod in state.pods.items() if pod.lifecycle == "Runnable")
        running = set(self._running)
        self._node_of = {key: state.pods[key].node for key in self._running}
        # Pods of each workload, by the workload's resource, for the application metrics.
        self._workload_pods: dict[str, dict[ObjectKey, list[ObjectKey]]] = {}
        for workload in ("deployments.apps", "replicasets.apps", "statefulsets.apps"):
            mapping = state.mapping(workload)
            assert mapping is not None
            members = self._workload_pods.setdefault(workload, {})
            for record in state.inventory.records(mapping.group_resource):
                owned = state.pods_owned_by(record.namespace, mapping.kind, record.name)
                members[record.key] = sorted(
                    (p.namespace, p.name) for p in owned if (p.namespace, p.name) in running
                )
        # Services and Ingresses are not watched kinds: added as plain objects.
        self._service_pods: dict[ObjectKey, list[ObjectKey]] = {}
        for (namespace, name), pods in self._workload_pods["deployments.apps"].items():
            if name != "worker":
                state.add("services", name, namespace=namespace, labels={"app": name})
                self._service_pods[(namespace, name)] = pods
        state.add("ingresses.networking.k8s.io", "web", namespace="default", labels={"app": "web"})
        state.add(
            "ingresses.networking.k8s.io", "shop", namespace="shop", labels={"app": "frontend"}
        )

    # Values ---------------------------------------------------------------------------------

    def _wave(self, key: object, tick: int, base: float) -> float:
        """base x a slow wave with a per-object phase, plus deterministic jitter (3 decimals)."""
        seed = self.settings.seed
        phase = _unit(seed, key, "phase") * 2 * math.pi
        jitter = _unit(seed, key, tick)
        return _wave(base, phase, tick, jitter)

    def build_snapshot(self, now: float) -> Snapshot:
        """All values at the tick containing `now`; a pure function of seed and time."""
        return drain(self._snapshot_steps(now))

    def _snapshot_steps(self, now: float) -> Generator[None, None, Snapshot]:
        """The snapshot build, pausing every ~1,000 objects.

        O(pods): per-pod constants are precomputed, so a tick costs one sine, two random
        draws and three samples per pod (about 100 ms of CPU for 10,000 pods, in slices).
        """
        interval = self.settings.interval
        tick = int(now // interval)
        timestamp = tick * interval
        seed = self.settings.seed
        builder = SnapshotBuilder(self.cluster, timestamp=timestamp)
        rps = builder.declare("pods", "http_requests_per_second", window=60)
        memory = builder.declare("pods", "memory_working_set_bytes")
        per_pod: dict[ObjectKey, float] = {}
        draws = random.Random(_hash(seed, "tick", tick))  # noqa: S311 - simulation, not security
        get_labels, post_labels = {"method": "GET"}, {"method": "POST"}
        add = builder.add
        for index, (key, base, phase, get_share, resident) in enumerate(self._pod_params):
            if index % 1024 == 1023:
                yield
            total = _wave(base, phase, tick, draws.random())
            get = round(total * get_share, 3)
            add(rps, key, get, get_labels)
            add(rps, key, round(total - get, 3), post_labels)
            per_pod[key] = total
            add(memory, key, resident + int(draws.random() * 4096) * 1024)

        def add_sum(resource: str, members: dict[ObjectKey, list[ObjectKey]]) -> MetricInfo:
            info = builder.declare(resource, "http_requests_per_second", window=60)
            for key, pods in members.items():
                builder.add(info, key, round(sum(per_pod[p] for p in pods), 3))
            return info

        for resource, members in self._workload_pods.items():
            add_sum(resource, members)
        add_sum("services", self._service_pods)
        by_namespace: dict[ObjectKey, list[ObjectKey]] = {}
        for key in per_pod:
            by_namespace.setdefault(("", key[0]), []).append(key)
        namespaces = list(self.cluster.inventory.records(GroupResource("", "namespaces")))
        for record in namespaces:
            by_namespace.setdefault(record.key, [])
        add_sum("namespaces", by_namespace)

        queue_length = builder.declare("namespaces", "queue_length")
        for record in namespaces:
            builder.add(queue_length, record.key, int(self._wave(record.key, tick, 120)))
        ingress = builder.declare("ingresses.networking.k8s.io", "requests_per_second", window=60)
        for record in self.cluster.inventory.records(
            GroupResource("networking.k8s.io", "ingresses")
        ):
            backend = record.labels.get("app", "")
            pods = self._service_pods.get((record.namespace, backend), [])
            builder.add(ingress, record.key, round(sum(per_pod[p] for p in pods), 3))
        load = builder.declare("nodes", "node_load1", window=60)
        node_pods: dict[str, int] = {}
        for node in self._node_of.values():
            node_pods[node] = node_pods.get(node, 0) + 1
        for record in self.cluster.inventory.records(GroupResource("", "nodes")):
            busy = node_pods.get(record.name, 0) / 30
            builder.add(load, record.key, self._wave(record.key, tick, 0.5 + busy))

        queues = {
            "default": ("emails", "jobs"),
            "shop": ("orders", "payments"),
            "batch": ("reports",),
        }
        for namespace, names in queues.items():
            for queue in names:
                depth = int(self._wave((namespace, queue), tick, 40 + 80 * _unit(seed, queue)))
                builder.add_external(
                    "queue_depth", depth, labels={"queue": queue}, namespace=namespace
                )
        builder.add_external(
            "cluster_requests_per_second", round(sum(per_pod.values()), 3), window=60
        )
        return (yield from builder.build_steps())

    def tick(self) -> None:
        """Publish the snapshot for the current time (synchronously)."""
        self.publish(self.build_snapshot(self._clock()))

    # Usage: kubelet expositions through the real parser and rate code ------------------------

    def _usage_plan(self) -> dict[str, list[tuple[ObjectKey, str, float, float, float, float]]]:
        """Per node: (pod, container, cpu request, memory request, phase, start) of each
        running container; usage moves around its request on a per-container wave."""
        seed = self.settings.seed
        plan: dict[str, list[tuple[ObjectKey, str, float, float, float, float]]] = {}
        day = self._clock() // 86400 * 86400  # not the start-up time: the same in every process
        started = day - 3600 - 86400 * _unit(seed, "uptime")
        for pod in self.world.objects.get(PODS, ()):
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            if key not in self._node_of:
                continue
            spec = pod["spec"]
            sidecars = [
                c for c in spec.get("initContainers", ()) if c.get("restartPolicy") == "Always"
            ]
            for container in [*spec["containers"], *sidecars]:
                requests = container.get("resources", {}).get("requests", {})
                cpu = float(Quantity.parse(requests.get("cpu", "50m")).value)
                memory = float(Quantity.parse(requests.get("memory", "64Mi")).value)
                phase = _unit(seed, key, container["name"], "usage") * 2 * math.pi
                start = round(started + 600 * _unit(seed, key, "start"))
                plan.setdefault(self._node_of[key], []).append(
                    (key, container["name"], cpu, memory, phase, start)
                )
        return plan

    def _scrape_steps(self, now: float) -> Generator[None, None, None]:
        """Advance every container's CPU counter to `now`, render each node's exposition as
        the kubelet would, and feed it to the usage store as the scraper does: through
        `read_usage_rows`, given what the store knows of the node (so an unchanged node's
        rows reuse its layout). O(containers), pausing after every few nodes."""
        tick = now / self.settings.interval
        elapsed = now - self._last_scrape if self._last_scrape else self.settings.interval
        self._last_scrape = now
        for index, (node, containers) in enumerate(self._usage.items()):
            rows = []
            node_cpu = node_memory = 0.0
            for key, name, cpu, memory, phase, start in containers:
                wave = math.sin(2 * math.pi * tick / 240 + phase)
                cores = cpu * (0.75 + 0.45 * wave)
                counter = self._cpu_seconds.get((key, name), cpu * 600) + cores * elapsed
                self._cpu_seconds[(key, name)] = counter
                working_set = memory * (0.85 + 0.2 * wave)
                node_cpu += counter
                node_memory += working_set
                rows.append(
                    demo_kubelets.ContainerUsage(key[0], key[1], name, counter, working_set, start)
                )
            body = demo_kubelets.kubelet_exposition(
                rows, node_cpu_seconds=node_cpu * 1.1, node_memory=node_memory * 1.2, now=now
            )
            known = self.usage.known(node)
            self.usage.apply_rows(node, read_usage_rows(body, default_time=now, known=known), now)
            if index % 20 == 19:
                yield

    def _tick_start(self, now: float) -> float:
        return now // self.settings.interval * self.settings.interval

    def scrape(self, now: float) -> None:
        """One simulated kubelet scrape of every node (synchronously)."""
        drain(self._scrape_steps(now))

    # Lifecycle ---------------------------------------------------------------------------------

    async def _run(self) -> None:
        interval = self.settings.interval
        while True:
            now = self._clock()
            await asyncio.sleep(interval - now % interval + 0.001)
            # Both in slices: a request waits at most one slice, not a whole build or scrape.
            self.publish(await run_cooperatively(self._snapshot_steps(self._clock())))
            await run_cooperatively(self._scrape_steps(self._tick_start(self._clock())))
            settle_heap()

    async def __aenter__(self) -> Self:
        self._tasks.start(self._run(), name="simulated-cluster-ticks")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._tasks.stop()

    def ready(self) -> Readiness:
        """Ready once the first snapshot exists (built in the constructor)."""
        return Readiness(ready=True)
