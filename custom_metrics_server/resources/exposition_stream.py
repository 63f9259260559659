"""kube-scheduler's KEP-1748 ``/metrics/resources`` body, streamed in bounded chunks: the one
writer of the body (whole, it is the chunks joined).

PURE: standard library only, no I/O, no logging, no clocks. :func:`stream_pod_resources` yields
the exact bytes of :func:`.exposition.render_pod_resource_metrics` over the pods' rows (same
families, HELP/TYPE lines, label order, escaping, float formatting and series order) without
building the body: series are sorted by label values in label-name order (``namespace, node,
pod, ...``), so when no label value holds a character sorting before ``"`` (valid Kubernetes
names never do) the body is the pods grouped by namespace, namespaces in order, each group's
pod blocks sorted as strings, once for ``kube_pod_resource_limit`` and once for
``kube_pod_resource_request``. A namespace of more than ``_GROUP_PODS`` pods is split by node
(the next label), so a group is at most one node's pods of a namespace (or its unscheduled
pods). Anything else (an escaped or early-sorting value, a pod given twice) falls back to the
rows renderer, whose output is then cut into chunks.

Memory: the records are snapshotted (one reference per pod, in per-namespace lists) when
the first chunk is asked for, so the body is the state of that moment even when the records
change between chunks; beyond that, one group's rendered blocks and one chunk
(``chunk_bytes`` plus one group's text) are alive at a time, and small caches (one entry per
distinct resource mapping, value and label value). It must not read kubelet text (that is
:mod:`kubelet_format`) or decide what a pod requests (that is :mod:`.model`).

Cost: O(p log g) for p pods in groups of at most g; per pod one label-prefix string and one
C join per family (a pod's lines of a family are its prefix joined with the rendered tails
of its resource mapping, cached per mapping object: pods of one resource shape share one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, Protocol, SupportsFloat

from custom_metrics_server.machinery.promtext import format_go_float
from custom_metrics_server.resources.exposition import (
    _LIMIT,
    _REQUEST,
    _UNSAFE,
    LIMIT_HELP,
    REQUEST_HELP,
    PodResourceRow,
    render_pod_resource_metrics,
)

__all__ = ["CHUNK_BYTES", "PodResourceRecord", "stream_pod_resources"]

#: Bytes of series text gathered before a chunk is yielded (a chunk is this plus at most one
#: group's text).
CHUNK_BYTES: Final = 256 * 1024
#: Pods of one namespace rendered as one group; a bigger namespace is split by node.
_GROUP_PODS: Final = 256
#: Distinct resource mappings whose rendered tails are kept at once.
_PARTS_LIMIT: Final = 4096


class PodResourceRecord(Protocol):
    """What the stream reads of a pod (``records.PodRecord`` has it)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def node(self) -> str: ...

    @property
    def scheduler(self) -> str: ...

    @property
    def priority(self) -> str: ...

    @property
    def metric_requests(self) -> Mapping[str, SupportsFloat]: ...

    @property
    def metric_limits(self) -> Mapping[str, SupportsFloat]: ...


def _snapshot(
    pods: Iterable[PodResourceRecord], unit: Callable[[str], str]
) -> tuple[dict[str, list[PodResourceRecord]], bool]:
    """The pods by namespace, and whether the sorted-groups form gives the exact body (no
    label value that Go escapes or that sorts before ``"``, no pod given twice). O(pods)."""
    groups: dict[str, list[PodResourceRecord]] = {}
    labels: set[str] = set()
    mappings: dict[int, Mapping[str, SupportsFloat]] = {}
    add, get = labels.add, groups.get
    for pod in pods:
        namespace = pod.namespace
        group = get(namespace)
        if group is None:
            group = groups[namespace] = []
        group.append(pod)
        add(pod.node)
        add(pod.priority)
        add(pod.scheduler)
        requests, limits = pod.metric_requests, pod.metric_limits
        mappings[id(requests)] = requests
        mappings[id(limits)] = limits
    labels.update(groups)
    resources = {resource for values in mappings.values() for resource in values}
    labels.update(resources)
    labels.update(unit(resource) for resource in resources)
    if _UNSAFE.search("#".join(labels)):
        return groups, False
    for group in groups.values():
        names = [pod.name for pod in group]
        if _UNSAFE.search("#".join(names)) or len(set(names)) != len(names):
            return groups, False
    return groups, True


def _split(group: list[PodResourceRecord]) -> Iterator[list[PodResourceRecord]]:
    """A namespace's pods as groups in series order: whole, or by node when it is big."""
    if len(group) <= _GROUP_PODS:
        yield group
        return
    by_node: dict[str, list[PodResourceRecord]] = {}
    for pod in group:
        by_node.setdefault(pod.node, []).append(pod)
    for node in sorted(by_node):
        yield by_node[node]


class _Family:
    """One family's pod blocks: a pod's lines are ``head.join(parts)`` where ``parts`` is
    rendered once per (resource mapping, scheduler)."""

    def __init__(self, name: str, unit: Callable[[str], str], *, limits: bool) -> None:
        self.name = name
        self.sep = "\n" + name
        self.unit = unit
        self.limits = limits
        self.numbers: dict[object, str] = {}
        self.tails: dict[tuple[str, str], str] = {}
        # id(mapping) -> (mapping, parts): the mapping is kept so its id stays its own
        self.parts: dict[tuple[int, str], tuple[object, list[str] | None]] = {}

    def _parts(self, values: Mapping[str, SupportsFloat], scheduler: str) -> list[str] | None:
        suffixes = []
        for resource in sorted(values) if len(values) > 1 else values:
            value = values[resource]
            if value == 0:
                continue
            tail = self.tails.get((resource, scheduler))
            if tail is None:
                tail = self.tails[(resource, scheduler)] = (
                    f'{resource}",scheduler="{scheduler}",unit="{self.unit(resource)}"}} '
                )
            number = self.numbers.get(value)
            if number is None:
                number = self.numbers[value] = format_go_float(float(value))
            suffixes.append(tail + number)
        if not suffixes:
            return None
        return ["", *[suffix + self.sep for suffix in suffixes[:-1]], suffixes[-1]]

    def text(self, group: list[PodResourceRecord]) -> str:
        """The group's series lines, sorted, each ending in a newline ("" if none)."""
        blocks: list[str] = []
        append = blocks.append
        cache = self.parts
        limits = self.limits
        for pod in group:
            values = pod.metric_limits if limits else pod.metric_requests
            if not values:
                continue
            scheduler = pod.scheduler
            key = (id(values), scheduler)
            hit = cache.get(key)
            if hit is None:
                if len(cache) >= _PARTS_LIMIT:
                    cache.clear()
                hit = cache[key] = (values, self._parts(values, scheduler))
            parts = hit[1]
            if parts is not None:
                append(
                    f'{{namespace="{pod.namespace}",node="{pod.node}",pod="{pod.name}",'
                    f'priority="{pod.priority}",resource="'.join(parts)
                )
        if not blocks:
            return ""
        blocks.sort()
        return self.name + self.sep.join(blocks) + "\n"


def stream_pod_resources(
    pods: Iterable[PodResourceRecord],
    *,
    unit: Callable[[str], str],
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[bytes]:
    """The ``/metrics/resources`` body of these pods, as chunks of about
    ``chunk_bytes`` (none for an empty body). ``pods`` is consumed when the first chunk is
    asked for. ``unit`` gives a resource's ``unit`` label (``lifecycle.resource_unit``).

    Cost: O(p log g) (see the module); memory beyond one reference per pod is bounded by the
    largest group's text plus one chunk, independent of the cluster's size.
    """
    groups, exact = _snapshot(pods, unit)
    if not exact:
        yield from _whole(groups, unit, chunk_bytes)
        return
    order = sorted(groups)
    pending: list[str] = []
    size = 0
    for name, help_text, limits in ((_LIMIT, LIMIT_HELP, True), (_REQUEST, REQUEST_HELP, False)):
        family = _Family(name, unit, limits=limits)
        header = f"# HELP {name} {help_text}\n# TYPE {name} gauge\n"
        for namespace in order:
            for group in _split(groups[namespace]):
                text = family.text(group)
                if not text:
                    continue
                if header:
                    pending.append(header)
                    header = ""
                pending.append(text)
                size += len(text)
                if size >= chunk_bytes:
                    yield "".join(pending).encode("utf-8")
                    pending.clear()
                    size = 0
    if pending:
        yield "".join(pending).encode("utf-8")


def _whole(
    groups: Mapping[str, list[PodResourceRecord]], unit: Callable[[str], str], chunk_bytes: int
) -> Iterator[bytes]:
    """The rows renderer's body in chunks (labels it must escape or sort by value)."""
    pods = [pod for group in groups.values() for pod in group]
    body = render_pod_resource_metrics(
        _rows(pods, unit, limits=False), _rows(pods, unit, limits=True)
    )
    view = memoryview(body)
    for start in range(0, len(body), chunk_bytes):
        yield bytes(view[start : start + chunk_bytes])


def _rows(
    pods: list[PodResourceRecord], unit: Callable[[str], str], *, limits: bool
) -> Iterator[PodResourceRow]:
    for pod in pods:
        values = pod.metric_limits if limits else pod.metric_requests
        for resource, value in values.items():
            yield PodResourceRow(
                pod.namespace,
                pod.name,
                pod.node,
                pod.scheduler,
                pod.priority,
                resource,
                unit(resource),
                float(value),
            )
