"""Which memoised usage answers of pods still hold: the `pods/*` hot path.

A pod's usage sample (`kube_running_pod_resource_usage`, the utilizations) depends on its
record and its own usage only, timestamps included, not on the time of the request. So a
memoised sample holds while the pod's record is the same object and its usage token is
equal. The token is the usage source's `last_seen` of the pod's node: usage changes only
when that node's kubelet answers (or the node is forgotten), so it is asked once per node
per request; two scrapes of one node at the same instant are not told apart (a scraper
cannot make them). For a pod not bound to a node, or from a source without `last_seen`, the
token is the pod's usage itself. The usage store's generation, which the other answers are
validated by, moves with every node scraped: validated by it, every `pods/*` answer over a
3,000-pod namespace recomputed all 3,000 samples (49 ms) whenever any node had been scraped
since the last answer.

Cost: O(pods) dictionary lookups, about 0.2 us a pod when nothing changed; a pod whose node
was scraped since is recomputed by the caller's `compute`.

A table holds one entry per object asked about, and only objects that exist are memoised, so
`prune` bounds it by the live objects: the entries of deleted objects (a Job's pods, a rolled
Deployment's old ReplicaSet pods) are swept out once they outnumber a slack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

from custom_metrics_server.compute.records import PodRecord
from custom_metrics_server.domain import ObjectKey, Sample

__all__ = ["SLACK", "Answers", "pod_usage_samples", "prune"]

#: Entries of deleted objects a table may hold before they are swept out: this many, or an
#: eighth of the live objects if more (so a sweep happens at most once per that many
#: insertions).
SLACK: Final = 1024


class _Usage(Protocol):
    """What is read of the usage source (`metrics.UsageSource`; `last_seen` if it has it)."""

    def pod_usage(self, namespace: str, pod: str) -> object: ...


#: Memoised answers of one (metric, resource, selector): object -> (what the sample was
#: computed from, its usage token, when, the sample or None when the object has no value).
Answers = dict[ObjectKey, tuple[object, object, float, Sample | None]]


def pod_usage_samples(
    objects: Iterable[ObjectKey],
    table: Answers,
    pods: Mapping[ObjectKey, PodRecord],
    usage: _Usage,
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
) -> list[Sample]:
    """The samples of these pods, memoised ones where they hold, else `compute(key, record,
    token)` (which memoises the new one). O(pods)."""
    last_seen: Callable[[str], Any] | None = getattr(usage, "last_seen", None)
    pod_usage = usage.pod_usage
    pods_get = pods.get
    table_get = table.get
    seen: dict[str, object] = {}
    seen_get = seen.get
    found: list[Sample] = []
    append = found.append
    for key in objects:
        pod = pods_get(key)
        token: object = None
        if pod is not None:
            node = pod.node
            if node and last_seen is not None:
                token = seen_get(node, seen)
                if token is seen:
                    token = seen[node] = last_seen(node)
            else:
                token = pod_usage(*key)
        hit = table_get(key)
        sample = (
            hit[3]
            if hit is not None and hit[0] is pod and hit[1] == token
            else compute(key, pod, token)
        )
        if sample is not None:
            append(sample)
    return found


def prune(table: Answers, live: Mapping[ObjectKey, object]) -> None:
    """Drop the entries of objects no longer in `live` once the table holds more than the
    live objects plus the slack (every entry is of an object that existed when it was made).
    O(1) while within; a sweep is O(table) and leaves at most `len(live)` entries, so the next
    one comes `SLACK` insertions later at the earliest: amortised O(1) an insertion."""
    count = len(live)
    if len(table) > count + max(SLACK, count >> 3):
        for key in [key for key in table if key not in live]:
            del table[key]
