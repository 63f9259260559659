"""The series of the resource model's metrics, and their sum: pure helpers of `metrics`.

Cost: O(pods x resources) per call; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Final, Protocol

from custom_metrics_server.cluster_state.records import NodeRecord, PodRecord
from custom_metrics_server.domain import ObjectRef
from custom_metrics_server.errors import BadRequest
from custom_metrics_server.resources.lifecycle import resource_unit

__all__ = [
    "Number",
    "Series",
    "allocation_series",
    "check_units",
    "labels_of",
    "node_series",
    "selectable",
    "total",
    "usage_series",
    "utilization_series",
]

Number = Decimal | float
Series = tuple[Mapping[str, str], Number]
_ZERO: Final = Decimal(0)


class _Usage(Protocol):
    """What is read of a pod's usage (`metrics.PodUsage`)."""

    @property
    def cpu_cores(self) -> float: ...

    @property
    def memory_bytes(self) -> float: ...


class _Memory(Protocol):
    """What is read of a pod's memory alone (`usage_values.MemoryUsage`)."""

    @property
    def memory_bytes(self) -> float: ...


Usages = Sequence[tuple[PodRecord, _Usage]]


def selectable(resource: str) -> str:
    """The `resource` label value of a resource name: label values cannot hold `/`, so
    extended resources are written with `_` (`nvidia.com/gpu` -> `nvidia.com_gpu`) and stay
    selectable with `metricLabelSelector=resource=nvidia.com_gpu`."""
    return resource.replace("/", "_")


def labels_of(resource: str, **extra: str) -> dict[str, str]:
    """The `resource` and `unit` labels of a resource's series, and `extra`."""
    return {"resource": selectable(resource), "unit": resource_unit(resource), **extra}


def allocation_series(
    pods: Sequence[PodRecord], values: Callable[[PodRecord], Mapping[str, Decimal]], *, pod: bool
) -> list[Series]:
    """A summed metric (`values` of each pod) over pods; a pod's own series (`pod`) carry
    the kube-scheduler labels."""
    if pod:
        one = pods[0]
        return [
            (labels_of(resource, node=one.node, scheduler=one.scheduler, priority=one.priority), v)
            for resource, v in sorted(values(one).items())
        ]
    totals: dict[str, Decimal] = {}
    for each in pods:
        for resource, value in values(each).items():
            totals[resource] = totals.get(resource, _ZERO) + value
    return [(labels_of(resource), value) for resource, value in sorted(totals.items())]


def node_series(record: NodeRecord | None, pods: Iterable[PodRecord]) -> list[Series]:
    """A node's allocatable resources less the requests of `pods` (available: its Runnable
    pods; allocatable: none); nothing for an unknown node."""
    if record is None:
        return []
    allocatable = dict(record.allocatable)
    for pod in pods:
        for resource, value in pod.requests.items():
            if resource in allocatable:
                allocatable[resource] -= value
    return [(labels_of(resource), value) for resource, value in sorted(allocatable.items())]


def usage_series(
    usages: Usages, *, node: bool, memories: Sequence[tuple[PodRecord, _Memory]] | None = None
) -> list[Series]:
    """cpu usage summed over the pods of `usages`, memory over those of `memories` (default:
    the same; pods whose CPU rate is not known yet may have their memory); with a `node`
    label: one pod's. No cpu series without usages."""
    memories = usages if memories is None else memories
    first = (usages or memories)[0][0]
    cpu_labels, memory_labels = _usage_labels(first.node if node else None)
    found: list[Series] = []
    if usages:
        # Micro-cores and whole bytes: finer digits are noise from float rates.
        found.append((cpu_labels, round(sum(u.cpu_cores for _, u in usages), 6)))
    if memories:
        found.append((memory_labels, float(round(sum(u.memory_bytes for _, u in memories)))))
    return found


#: The usage series' label sets by node (None: no node label), shared by every sample of
#: the node's pods (read-only): a memoised pod answer keeps its labels, and 75,000 memoised
#: answers held 14 MiB of equal dicts. Bounded: node names come from the cluster.
_USAGE_LABELS: dict[str | None, tuple[Mapping[str, str], Mapping[str, str]]] = {}
_USAGE_LABELS_LIMIT: Final = 65_536


def _usage_labels(node: str | None) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """The (cpu, memory) label sets of a usage series. O(1)."""
    found = _USAGE_LABELS.get(node)
    if found is None:
        if len(_USAGE_LABELS) >= _USAGE_LABELS_LIMIT:
            _USAGE_LABELS.clear()
        extra = {} if node is None else {"node": node}
        found = _USAGE_LABELS[node] = (labels_of("cpu", **extra), labels_of("memory", **extra))
    return found


def utilization_series(usages: Usages, view: str, *, hpa: bool, node: bool) -> list[Series]:
    """Summed usage over summed requests (the HPA's when `hpa`) of the pods that have both,
    per resource; `view` is the `requests` label."""
    extra = {"node": usages[0][0].node} if node else {}
    found: list[Series] = []
    for resource in ("cpu", "memory"):
        used = requested = 0.0
        for pod, usage in usages:
            request = (pod.hpa_requests if hpa else pod.requests).get(resource)
            if request:
                used += usage.cpu_cores if resource == "cpu" else usage.memory_bytes
                requested += float(request)
        if requested:
            # Three decimals: a ratio is read as a percentage, not to the nano.
            labels = {"resource": resource, "unit": "ratio", "requests": view, **extra}
            found.append((labels, round(used / requested, 3)))
    return found


def total(values: Iterable[Number]) -> Number:
    """The sum, exact (Decimal) until a float joins."""
    found: Number = _ZERO
    for value in values:
        if isinstance(found, Decimal) and isinstance(value, float):
            found = float(found)
        found = found + value  # type: ignore[operator]
    return found


def check_units(metric: str, ref: ObjectRef, series: list[Series]) -> None:
    """Summing cores with bytes (or ratios of different resources) is meaningless: 400."""
    units = {labels.get("unit", "") for labels, _ in series}
    resources = sorted({labels.get("resource", "") for labels, _ in series})
    if len(units) > 1 or ("ratio" in units and len(resources) > 1):
        pairs = sorted(
            {(labels.get("resource", ""), labels.get("unit", "")) for labels, _ in series}
        )
        choices = ", ".join(f"{resource} ({unit})" for resource, unit in pairs)
        where = f"{ref.kind.lower()} {ref.namespace + '/' if ref.namespace else ''}{ref.name}"
        raise BadRequest(
            f"metric {metric} of {where} has series in different units: {choices}; "
            f"choose one with metricLabelSelector, for example resource={resources[0]}"
        )
