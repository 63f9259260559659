"""Which memoised answers of objects that hold pods still hold: the Object queries' hot path.

The answer of a workload, namespace or node (requests, limits, usage, utilizations; a node's
allocatable and available) is computed from its record's `describedObject`, the records of
the pods it holds in the order its index yields them (owner, namespace or node), for the
usage metrics each of those pods' usage, and for node metrics the node's record. So a
memoised answer holds while those pods are the same record objects in the same order and
their usage tokens are equal: as in `pod_usage_answers`, a pod's token is the usage source's
`last_seen` of its node (usage changes only when that node's kubelet answers, or the node is
forgotten), or its usage itself for a pod bound to no node or a source without `last_seen`.
The state's and the usage store's global generations are not used: they move with every
watch event and every node scraped, so on a large cluster a memo validated by them would
never hold (docs/performance.md, "Memos of the Kubernetes backend").

Cost of `object_samples`: when neither generation moved since an answer was last checked, one
tuple comparison; else the held pods are found again through the index and compared,
O(pods held) (owner index: O(the workload's pods and controllers)), never O(cluster). On a
miss, `compute` is given what was found, so the index is walked once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import is_
from typing import Protocol

from custom_metrics_server.backends.kubernetes.pod_usage_answers import Answers
from custom_metrics_server.cluster.inventory import ObjectRecord
from custom_metrics_server.cluster_state.records import ClusterState, NodeRecord, PodRecord
from custom_metrics_server.domain import GroupResource, ObjectKey, Sample

__all__ = ["Held", "held_by", "object_samples"]


class _Usage(Protocol):
    """What is read of the usage source (`metrics.UsageSource`; `last_seen` if it has it)."""

    def pod_usage(self, namespace: str, pod: str) -> object: ...


@dataclass(slots=True)
class Held:
    """What one object's answer was computed from (`pods` None: the object holds no pod
    list, as for a node's allocatable), and the generations it was last found valid at."""

    generations: tuple[int, int]
    node: NodeRecord | None
    pods: list[PodRecord] | None
    tokens: list[object] | None

    def same(self, other: Held) -> bool:
        """Whether an answer computed from `self` is the one `other` gives. O(pods)."""
        if self.node is not other.node:
            return False
        mine, theirs = self.pods, other.pods
        if mine is None or theirs is None:
            if mine is not theirs:
                return False
        elif len(mine) != len(theirs) or not all(map(is_, mine, theirs)):
            return False
        return self.tokens == other.tokens


def _tokens(pods: Iterable[PodRecord], usage: _Usage) -> list[object]:
    """The usage token of each pod (see the module docstring). O(pods)."""
    last_seen: Callable[[str], object] | None = getattr(usage, "last_seen", None)
    pod_usage = usage.pod_usage
    if last_seen is None:
        return [pod_usage(pod.namespace, pod.name) for pod in pods]
    return [last_seen(pod.node) if pod.node else pod_usage(pod.namespace, pod.name) for pod in pods]


def object_samples(
    objects: Iterable[ObjectKey],
    table: Answers,
    records: Mapping[ObjectKey, ObjectRecord],
    held: Callable[[ObjectKey, tuple[int, int]], Held],
    compute: Callable[[ObjectKey, ObjectRecord, Held], Sample | None],
    *,
    generations: tuple[int, int],
    now: float,
    fresh: float,
) -> list[Sample]:
    """The samples of these objects (of the resource `records` holds), memoised ones where
    they hold and are younger than `fresh` seconds, else `compute(key, record, held)` (which
    memoises the new one). `held(key, generations)` finds what an answer depends on now.
    O(objects) on an unchanged state, else O(pods held by the objects)."""
    found: list[Sample] = []
    append = found.append
    table_get = table.get
    for key in objects:
        record = records.get(key)
        if record is None:
            continue
        hit = table_get(key)
        current: Held | None = None
        # A memoised entry: (Held, the object's record, when, the sample or None); a watch
        # event replaces the record, so identity says the object did not change.
        if hit is not None and hit[1] is record and now - hit[2] < fresh:
            was = hit[0]
            assert isinstance(was, Held)
            if was.generations != generations:
                current = held(key, generations)
                if was.same(current):
                    was.generations = generations
                    current = None
            if current is None:
                if hit[3] is not None:
                    append(hit[3])
                continue
        sample = compute(key, record, current or held(key, generations))
        if sample is not None:
            append(sample)
    return found


def held_by(
    state: ClusterState,
    usage: _Usage | None,
    gr: GroupResource,
    key: ObjectKey,
    generations: tuple[int, int],
    *,
    node_metric: bool,
    needs_pods: bool,
    needs_usage: bool,
) -> Held:
    """What an object's answer depends on now: for a node metric the node's record (and
    its Runnable pods when `needs_pods`), else the pods the object holds (None if it is
    unknown) and, when `needs_usage`, their usage tokens. O(pods held)."""
    if node_metric:
        pods = state.pods_on_node(key[1]) if needs_pods else None
        return Held(generations, state.nodes.get(key[1]), pods, None)
    pods = state.pods_of(gr, key)
    tokens = _tokens(pods, usage) if needs_usage and pods and usage is not None else None
    return Held(generations, None, pods, tokens)
