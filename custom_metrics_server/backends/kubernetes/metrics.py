"""KEP-1748 resource metrics over a `ClusterState` and a source of usage.

Serves, for pods, namespaces, nodes and workloads (`deployments.apps`, `statefulsets.apps`,
`replicasets.apps`, `daemonsets.apps`, `jobs.batch`):

* `kube_pod_resource_request` / `kube_pod_resource_limit` (aliases `..._requests`,
  `..._limits`): what the scheduler counts, per resource. A pod's series carry the
  kube-scheduler label set (`resource`, `unit`, `node`, `scheduler`, `priority`); an object
  holding pods sums them per resource (namespace: Schedulable + Runnable pods; node: Runnable
  pods bound to it; workload: its non-completed pods through ownerReferences).
* `kube_pod_resource_request_hpa`: the request the HorizontalPodAutoscaler divides usage by
  (pod-level requests when set, else the regular and sidecar containers' requests; no
  overhead, no init containers, no resize status), summed the same way.
* `kube_running_pod_resource_usage`: cpu cores and memory working-set bytes from the kubelet
  (labels `resource`, `unit`, `node`), summed the same way over pods that have usage.
* `kube_pod_resource_utilization` / `kube_pod_resource_utilization_hpa`: usage / request per
  resource (unit `ratio`, label `requests` = `kep-1748` or `hpa` naming the denominator); for
  an object, summed usage over summed requests of its pods that have both.
* nodes: `kube_node_resource_allocatable` and `kube_node_resource_available` (allocatable
  minus the requests of Runnable pods on the node).

`metricLabelSelector` picks series (`resource=cpu`); the series left are summed. An answer
that would add different units (cpu cores and memory bytes) is a 400 naming the choices.

Absence is not an error: a Completed pod or a pod without usage yet has no value. An object
that holds pods answers sums over them, and a sum over nothing is 0: a namespace, node or
workload with no pods (a Deployment scaled to zero) answers 0 for requests, limits and usage,
and for requests and limits of a resource none of its pods asks for. A ratio over nothing has
no value: utilization is absent when no pod has both usage and a request.

Cost of `fetch`: O(objects x pods held x resources); no allocation beyond the answer.

One piece (about 480 lines, over the house's 400): `ResourceMetricsBackend` is one class whose
fetch path (object selection, the memo tables, the series) shares its tables and the cluster
state; what could leave already has (the series in :mod:`.metric_series`, the memos'
validity in :mod:`.object_answers` and :mod:`.pod_usage_answers`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from decimal import Decimal
from functools import partial
from operator import attrgetter
from types import TracebackType
from typing import Final, Protocol, Self

from custom_metrics_server.backends.kubernetes.metric_series import (
    Series,
    allocation_series,
    check_units,
    node_series,
    total,
    usage_series,
    utilization_series,
)
from custom_metrics_server.backends.kubernetes.object_answers import Held, held_by, object_samples
from custom_metrics_server.backends.kubernetes.pod_usage_answers import (
    Answers,
    Asked,
    Journals,
    Lists,
    pod_usage_samples,
    prune,
    remember,
)
from custom_metrics_server.cluster.inventory import ObjectRecord
from custom_metrics_server.cluster_state.records import (
    NODES,
    PODS,
    WATCHED,
    ClusterState,
    PodRecord,
)
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    ObjectRef,
    Readiness,
    Sample,
)
from custom_metrics_server.machinery.labels import Selector

REQUEST: Final = "kube_pod_resource_request"
LIMIT: Final = "kube_pod_resource_limit"
HPA_REQUEST: Final = "kube_pod_resource_request_hpa"
USAGE: Final = "kube_running_pod_resource_usage"
UTILIZATION: Final = "kube_pod_resource_utilization"
HPA_UTILIZATION: Final = "kube_pod_resource_utilization_hpa"
ALLOCATABLE: Final = "kube_node_resource_allocatable"
AVAILABLE: Final = "kube_node_resource_available"
ALIASES: Final = {"kube_pod_resource_requests": REQUEST, "kube_pod_resource_limits": LIMIT}
POD_METRICS: Final = (
    REQUEST,
    LIMIT,
    HPA_REQUEST,
    USAGE,
    UTILIZATION,
    HPA_UTILIZATION,
    *ALIASES,
)
NODE_METRICS: Final = (ALLOCATABLE, AVAILABLE)
#: Metrics whose value for an object is a sum over the pods it holds (0 over none).
_SUMS: Final = frozenset({REQUEST, LIMIT, HPA_REQUEST})
#: Metrics computed from the usage source.
_USAGE_METRICS: Final = frozenset({USAGE, UTILIZATION, HPA_UTILIZATION})
#: The `requests` label of a utilization series: which request it divides by.
_REQUESTS_VIEW: Final = {UTILIZATION: "kep-1748", HPA_UTILIZATION: "hpa"}
#: The pod's values of a summed metric.
_ALLOCATION: Final = {
    REQUEST: attrgetter("requests"),
    LIMIT: attrgetter("limits"),
    HPA_REQUEST: attrgetter("hpa_requests"),
}

_ZERO: Final = Decimal(0)
_FRESH: Final = 10.0  # seconds a memoised answer (and its timestamp) may be reused
_CACHE_LIMIT: Final = 200_000  # answers per (metric, resource, selector)
_TABLE_LIMIT: Final = 1_000  # distinct (metric, resource, selector) combinations


class PodUsage(Protocol):
    """What a usage source knows of one pod."""

    @property
    def cpu_cores(self) -> float: ...

    @property
    def memory_bytes(self) -> float: ...  # working set

    @property
    def timestamp(self) -> float: ...

    @property
    def window(self) -> float: ...


class MemoryOnly(Protocol):
    """What a usage source knows of a pod before its CPU rate (`usage_values.MemoryUsage`)."""

    @property
    def memory_bytes(self) -> float: ...

    @property
    def timestamp(self) -> float: ...


class UsageSource(Protocol):
    """Current usage per pod (the kubelet scraper's store, or the simulated one)."""

    def pod_usage(self, namespace: str, pod: str) -> PodUsage | None: ...


class ResourceMetricsBackend:
    """Requests, limits, usage and capacity per object, from compact cluster records."""

    def __init__(
        self,
        state: ClusterState,
        usage: UsageSource | None = None,
        *,
        name: str = "kubernetes",
        clock: Callable[[], float] = time.time,
        usage_ready: Callable[[], Readiness] | None = None,
    ) -> None:
        self.name = name
        self.state = state
        self.usage = usage
        self._clock = clock
        self._usage_ready = usage_ready
        resources = [m for m in state.mapper.mappings if m.group_resource in WATCHED]
        infos = {
            MetricInfo(m.group_resource, m.namespaced, metric)
            for m in resources
            for metric in POD_METRICS
        }
        node = next(m for m in resources if m.group_resource == NODES)
        infos |= {MetricInfo(NODES, node.namespaced, metric) for metric in NODE_METRICS}
        self._metrics = frozenset(infos)
        self._answers: dict[tuple[str, GroupResource, Selector], Answers] = {}
        self._lists: dict[tuple[str, GroupResource, Selector], Lists] = {}
        self._asked: dict[tuple[str, GroupResource, Selector], Asked] = {}
        node_journal = getattr(usage, "node_journal", None)
        self._journals: Journals | None = (
            None if node_journal is None else (state.pod_journal, node_journal)
        )

    def list_metrics(self) -> Collection[MetricInfo]:
        """See `MetricsBackend.list_metrics`."""
        return self._metrics

    def list_external_metrics(self) -> Collection[str]:
        """This backend serves no external metrics."""
        return ()

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """This backend serves no external metrics."""
        return ()

    def ready(self) -> Readiness:
        """Ready once every watched resource is listed (usage may still be warming up)."""
        return self.state.ready()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """See `MetricsBackend.fetch`; 400 when the answer would mix units.

        Answers are memoised per (metric, object, selector) while what they were computed
        from is unchanged, so the HPA's repeated queries reuse the same samples and their
        rendered JSON. What "unchanged" means: for a pod, its record, and for usage its
        node's `last_seen` (`pod_usage_answers`); for an object that holds pods, the records
        of those pods and their usage tokens (`object_answers`: O(pods held), or O(1) while
        neither the state's nor the usage store's generation moved). Not for the global
        generations alone: at 150,000 pods they move every few milliseconds.
        """
        metric = ALIASES.get(request.metric.metric, request.metric.metric)
        gr = request.metric.group_resource
        if len(self._answers) > _TABLE_LIMIT:
            self._answers.clear()
            self._lists.clear()
            self._asked.clear()
        # One table per (metric, resource, selector): the selector is hashed once per request.
        which = (request.metric.metric, gr, request.metric_selector)
        table = self._answers.setdefault(which, {})
        live = self.state.pods if gr == PODS else self.state.inventory.table(gr)
        prune(table, live)
        if len(table) > _CACHE_LIMIT:
            table.clear()
        now = float(int(self._clock()))
        usage_generation = getattr(self.usage, "generation", 0) if metric in _USAGE_METRICS else 0
        if gr != PODS:
            return self._objects(
                request, metric, table, (self.state.generation, usage_generation), now
            )
        # Pods asked about once (`remember`); other objects are memoised by `object_answers`.
        asked = self._asked.setdefault(which, {})
        prune(asked, live)
        if len(asked) > _CACHE_LIMIT:
            asked.clear()
        if self.usage is not None and metric in _USAGE_METRICS:
            return pod_usage_samples(
                request.objects,
                table,
                self.state.pods,
                self.usage,
                lambda key, pod, token: self._memoised(
                    request, metric, (table, asked), key, source=pod, token=token, now=now
                ),
                lists=self._lists.setdefault(which, {}),
                journals=self._journals,
            )
        pods = self.state.pods
        found: list[Sample] = []
        append = found.append
        for key in request.objects:
            source = pods.get(key)
            hit = table.get(key)
            if (
                hit is not None
                and hit[0] is source
                and hit[1] == usage_generation
                and now - hit[2] < _FRESH
            ):
                if hit[3] is not None:
                    append(hit[3])
                continue
            sample = self._memoised(
                request,
                metric,
                (table, asked),
                key,
                source=source,
                token=usage_generation,
                now=now,
            )
            if sample is not None:
                append(sample)
        return found

    def _objects(
        self,
        request: BackendRequest,
        metric: str,
        table: Answers,
        generations: tuple[int, int],
        now: float,
    ) -> list[Sample]:
        """Samples of objects that are not pods: memoised while the pods they hold, their
        usage and (for node metrics) the node are unchanged (`object_answers`)."""
        gr = request.metric.group_resource
        held = partial(
            held_by,
            self.state,
            self.usage,
            gr,
            node_metric=metric in NODE_METRICS,
            needs_pods=metric == AVAILABLE,
            needs_usage=metric in _USAGE_METRICS,
        )

        def compute(key: ObjectKey, record: ObjectRecord, held: Held) -> Sample | None:
            sample = self._sample(
                name=request.metric.metric,
                metric=metric,
                gr=gr,
                key=key,
                ref=record.ref,
                selector=request.metric_selector,
                now=now,
                held=held,
            )
            table[key] = (held, record, now, sample)
            return sample

        return object_samples(
            request.objects,
            table,
            self.state.inventory.table(gr),
            held,
            compute,
            generations=generations,
            now=now,
            fresh=_FRESH,
        )

    def _memoised(
        self,
        request: BackendRequest,
        metric: str,
        tables: tuple[Answers, Asked],
        key: ObjectKey,
        *,
        source: object,
        token: object,
        now: float,
    ) -> Sample | None:
        """Compute one object's sample; memoise it under (source, token, now) when asked a
        second time from the same token (`pod_usage_answers.remember`)."""
        record = self.state.inventory.table(request.metric.group_resource).get(key)
        if record is None:
            return None
        sample = self._sample(
            name=request.metric.metric,
            metric=metric,
            gr=request.metric.group_resource,
            key=key,
            ref=record.ref,
            selector=request.metric_selector,
            now=now,
        )
        remember(*tables, key, (source, token, now, sample))
        return sample

    def _sample(
        self,
        *,
        name: str,
        metric: str,
        gr: GroupResource,
        key: ObjectKey,
        ref: ObjectRef,
        selector: Selector,
        now: float,
        held: Held | None = None,
    ) -> Sample | None:
        """The value of one object, or None when it has none; from what `held` found when
        given (the pods it holds, the node), else from the state."""
        series, timestamp, window, zero = self._series(metric, gr, key, held)
        chosen = (
            series if selector.is_everything() else [s for s in series if selector.matches(s[0])]
        )
        if not chosen:
            if not zero:
                return None
            # A sum over nothing: the object holds no pod, or none with a matching series.
            return Sample(described=ref, metric=name, value=_ZERO, timestamp=now)
        check_units(name, ref, chosen)
        return Sample(
            described=ref,
            metric=name,
            value=total(value for _, value in chosen),
            timestamp=timestamp or now,
            window=window,
            labels=chosen[0][0] if len(chosen) == 1 else {},
        )

    # Series per object -----------------------------------------------------------------------

    def _series(
        self, metric: str, gr: GroupResource, key: ObjectKey, held: Held | None
    ) -> tuple[list[Series], float, int | None, bool]:
        """(series, timestamp or 0 for "now", window, whether no series means 0) of one object.

        The last is true for an object that is not a pod when the metric sums its pods: always
        for requests and limits, and for usage when it holds no pod at all (with pods but no
        usage sample yet, the usage is unknown, not 0).
        """
        if metric in NODE_METRICS:
            return self._node_series(metric, key[1], held), 0.0, None, False
        pods = self.state.pods_of(gr, key) if held is None else held.pods
        if not pods:
            zero = pods is not None and gr != PODS and metric in (*_SUMS, USAGE)
            return [], 0.0, None, zero
        if metric in _SUMS:
            values = _ALLOCATION[metric]
            return allocation_series(pods, values, pod=gr == PODS), 0.0, None, gr != PODS
        usages = self._usages(pods)
        if metric == USAGE:
            # Memory is a gauge: served from a pod's first scrape, before its CPU rate.
            memories = self._memories(pods, usages)
            if not memories:
                return [], 0.0, None, False
            timestamp = min(u.timestamp for _, u in memories)
            window = round(max(u.window for _, u in usages)) if usages else None
            series = usage_series(usages, node=gr == PODS, memories=memories)
            return series, timestamp, window, False
        if not usages:
            return [], 0.0, None, False
        timestamp = min(u.timestamp for _, u in usages)
        window = round(max(u.window for _, u in usages))
        view = _REQUESTS_VIEW[metric]
        return (
            utilization_series(usages, view, hpa=metric == HPA_UTILIZATION, node=gr == PODS),
            timestamp,
            window,
            False,
        )

    def _usages(self, pods: Iterable[PodRecord]) -> list[tuple[PodRecord, PodUsage]]:
        if self.usage is None:
            return []
        return [
            (pod, usage)
            for pod in pods
            if (usage := self.usage.pod_usage(pod.namespace, pod.name)) is not None
        ]

    def _memories(
        self, pods: Sequence[PodRecord], usages: list[tuple[PodRecord, PodUsage]]
    ) -> Sequence[tuple[PodRecord, MemoryOnly]]:
        """The pods with a known working set: `usages` when every pod has usage, else each
        pod's usage or, before its CPU rate, its memory alone (a source's `pod_memory`).
        O(pods) lookups, only while some pod lacks usage."""
        if len(usages) == len(pods) or self.usage is None:
            return usages
        memory = getattr(self.usage, "pod_memory", None)
        if memory is None:
            return usages
        usage = self.usage.pod_usage
        found: list[tuple[PodRecord, MemoryOnly]] = []
        for pod in pods:
            known = usage(pod.namespace, pod.name) or memory(pod.namespace, pod.name)
            if known is not None:
                found.append((pod, known))
        return found

    def _node_series(self, metric: str, node: str, held: Held | None) -> list[Series]:
        record = self.state.nodes.get(node) if held is None else held.node
        if metric != AVAILABLE:
            return node_series(record, ())
        pods = self.state.pods_on_node(node) if held is None or held.pods is None else held.pods
        return node_series(record, pods)
