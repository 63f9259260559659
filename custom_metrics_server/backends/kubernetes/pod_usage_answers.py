"""Which memoised usage answers of pods still hold: the `pods/*` hot path.

A pod's usage sample (`kube_running_pod_resource_usage`, the utilizations) depends on its
record and its own usage only, timestamps included, not on the time of the request. So a
memoised sample holds while the pod's record is the same object and its usage token is
equal. The token is the usage source's `last_seen` of the pod's node: usage changes only
when that node's kubelet answers (or the node is forgotten), so it is asked once per node
per request; two scrapes of one node at the same instant are not told apart (a scraper
cannot make them). For a pod not bound to a node, or from a source without `last_seen`, the
token is the pod's usage itself. The usage store's generation is not used: it moves with
every node scraped, so a `pods/*` answer validated by it would be recomputed whole whenever
any node had been scraped since (docs/performance.md, "Memos of the Kubernetes backend").

Cost: O(pods) dictionary lookups when nothing changed; a pod whose node
was scraped since is recomputed by the caller's `compute`. A list of at least `LIST_MIN`
pods (`pods/*` over a namespace) is also memoised whole (`Lists`, given by the caller): its
pods' records, nodes and tokens are gathered by C maps (`map(dict.get, ...)`), compared with
the last answer's in C, and only the positions that differ go through the per-pod path. So a
3,000-pod answer costs ~4 C passes over the list plus O(changed) Python steps instead of
~10 Python steps a pod; the encoder compares the samples with its last list in the same way
(`api.render_cache.fragments`).

With `journals` (the pods' records and the usage store's scraped nodes, `machinery.journal`),
a list answer remembers the journals' positions and is brought up to date from what was
written since: O(changes) instead of the C passes, which on a large cluster are mostly cache
misses (docs/performance.md, "Memos of the Kubernetes backend"). A list that has fallen
behind by more changes than it has pods is checked whole.

One window is not seen by either check: a pod recreated under the same name on another node
while its old node's kubelet still lists it is answered with the usage the store attributes
to it (its predecessor's) until its new node is scraped, even after the old node drops it; at
most one scrape interval, and only for a name that moved between nodes.

A sample is memoised only when it is asked for a second time from the same usage token
(`remember`); the first ask leaves a marker: the token, in a table of its own (`Asked`), so
that a marker allocates nothing a request would scatter over the allocator's pools. An HPA
asks every 15 s and the scraper reads every node every 15 s, so nearly every HPA ask finds
its pod's node scraped since the last: memoising each of those samples (with its JSON
fragment) would hold one never-read answer per pod asked about (docs/performance.md, "Memos
of the Kubernetes backend"). Answers asked
twice between two scrapes (`pods/*` polled, two HPAs on one workload, a scrape interval
longer than the HPA's period) are memoised from the second ask; a memoised answer that went
stale drops back to a marker. The whole-list memo (`Lists`) keeps its samples either way.

A table holds one entry per object asked about, and only objects that exist are memoised, so
`prune` bounds it by the live objects: the entries of deleted objects (a Job's pods, a rolled
Deployment's old ReplicaSet pods) are swept out once they outnumber a slack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import compress
from operator import is_not, itemgetter, ne, or_
from typing import Any, Final, Protocol, cast

from custom_metrics_server.backends.kubernetes.stamp_bounds import StampBounds
from custom_metrics_server.cluster_state.records import PodRecord
from custom_metrics_server.domain import TIMESTAMP, ObjectKey, Sample, TimedSamples
from custom_metrics_server.machinery.journal import Journal

__all__ = [
    "LIST_MIN",
    "SLACK",
    "Answers",
    "Asked",
    "Journals",
    "Lists",
    "pod_usage_samples",
    "prune",
    "remember",
]

#: Lists shorter than this go through the per-pod loop alone (the C passes do not pay).
LIST_MIN: Final = 64
_LISTS_LIMIT: Final = 256
_NODE = itemgetter(PodRecord._fields.index("node"))  # a tuple index: half attrgetter's cost
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

#: Objects of one table asked about once: object -> the usage token of that ask (an object the
#: usage store holds anyway, so a marker allocates nothing beyond its slot; see `remember`).
Asked = dict[ObjectKey, object]

_NOT_ASKED: Final = object()


def remember(
    table: Answers,
    asked: Asked,
    key: ObjectKey,
    entry: tuple[object, object, float, Sample | None],
) -> None:
    """Memoise a just-computed `entry` (source, token, when, sample) if the object was last
    asked about with the same token, else mark the ask (a first one, or the memoised answer
    went stale). O(1); a marker is a slot of `asked`, a memoised answer ~0.8 KB."""
    token = entry[1]
    if asked.get(key, _NOT_ASKED) == token:
        table[key] = entry
        del asked[key]
    else:
        asked[key] = token
        table.pop(key, None)


class _Listed:
    """The last answer over one tuple of pods, position by position, and the journals'
    positions it is valid at (`marks`; None without journals)."""

    __slots__ = (
        "found",
        "keys",
        "marks",
        "missing",
        "positions",
        "records",
        "samples",
        "stamps",
        "tokens",
    )

    def __init__(
        self,
        keys: tuple[ObjectKey, ...],
        records: list[PodRecord],
        tokens: list[object],
        samples: list[Sample | None],
        marks: tuple[int, int] | None,
    ) -> None:
        self.keys, self.records, self.tokens, self.samples = keys, records, tokens, samples
        self.found = [sample for sample in samples if sample is not None]
        self.missing = len(samples) - len(self.found)
        self.marks = marks
        # key -> position, node -> positions: built on the first incremental check.
        self.positions: tuple[dict[ObjectKey, int], dict[str, list[int]]] | None = None
        # The samples' timestamps (with `marks`: kept up to date by `_since`).
        self.stamps: StampBounds | None = None

    def answer(self) -> list[Sample]:
        """A copy of the found samples for the caller; with their timestamps' bounds when
        they are kept (`TimedSamples`)."""
        if self.stamps is None or not self.found:
            return self.found.copy()
        bounds = self.stamps.bounds()
        assert bounds is not None
        return TimedSamples(self.found, *bounds)

    def where(self) -> tuple[dict[ObjectKey, int], dict[str, list[int]]]:
        """The positions of each key and of each node's pods. O(pods), once per answer."""
        if self.positions is None:
            by_node: dict[str, list[int]] = {}
            for i, node in enumerate(map(_NODE, self.records)):
                by_node.setdefault(node, []).append(i)
            self.positions = ({key: i for i, key in enumerate(self.keys)}, by_node)
        return self.positions


#: The journals of what a list answer is computed from: the pods' records, the usage store's
#: nodes (`ClusterState.pod_journal`, `UsageStore.node_journal`).
Journals = tuple[Journal[ObjectKey], Journal[str]]


#: Memoised whole answers of one table, by (number of pods, first pod).
Lists = dict[tuple[int, ObjectKey], _Listed]


def pod_usage_samples(
    objects: Iterable[ObjectKey],
    table: Answers,
    pods: Mapping[ObjectKey, PodRecord],
    usage: _Usage,
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
    *,
    lists: Lists | None = None,
    journals: Journals | None = None,
) -> list[Sample]:
    """The samples of these pods, memoised ones where they hold, else `compute(key, record,
    token)` (which memoises the new one). O(pods); see the module docstring for `lists`, and
    for `journals` (the pods' records' and the usage store's nodes') `_since`."""
    if lists is not None and isinstance(objects, tuple) and len(objects) >= LIST_MIN:
        seen: Mapping[str, object] | None = getattr(usage, "seen_by_node", None)
        if seen is not None:
            listed = _listed(objects, table, pods, seen, compute, lists=lists, journals=journals)
            if listed is not None:
                return listed
    return _each(objects, table, pods, usage, compute)


def _listed(
    objects: tuple[ObjectKey, ...],
    table: Answers,
    pods: Mapping[ObjectKey, PodRecord],
    seen: Mapping[str, object],
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
    *,
    lists: Lists,
    journals: Journals | None,
) -> list[Sample] | None:
    """The whole-list path; None when a pod is unknown or bound to no node (the per-pod path
    then answers). O(pods) in C + O(changed pods); O(changes) when `_since` can tell."""
    slot = (len(objects), objects[0])
    last = lists.get(slot)
    marks = None
    if journals is not None:
        marks = (journals[0].position, journals[1].position)
        if last is not None and last.marks is not None:
            if last.keys is not objects and last.keys == objects:
                last.keys = objects  # the same pods in a new tuple: compared once
            if last.keys is objects:
                found = _since(
                    last,
                    table=table,
                    pods=pods,
                    seen=seen,
                    compute=compute,
                    journals=journals,
                    marks=marks,
                )
                if found is not None:
                    return found
    records: list[Any] = list(map(pods.get, objects))
    if not all(records):
        return None
    nodes = list(map(_NODE, records))
    if not all(nodes):
        return None
    tokens = list(map(seen.get, nodes))
    if last is not None and last.keys == objects:
        changed = list(
            compress(
                range(len(objects)),
                map(or_, map(is_not, records, last.records), map(ne, tokens, last.tokens)),
            )
        )
        if not changed:
            return last.found.copy()  # the caller's to keep or change
        samples = last.samples.copy()
        for i in changed:
            samples[i] = _one(objects[i], records[i], tokens[i], table, compute)
    else:
        samples = [
            _one(key, record, token, table, compute)
            for key, record, token in zip(objects, records, tokens, strict=True)
        ]
    if len(lists) >= _LISTS_LIMIT:
        lists.clear()
    listed = lists[slot] = _Listed(objects, records, tokens, samples, marks)
    if marks is not None:
        listed.stamps = StampBounds(map(TIMESTAMP, listed.found))
    return listed.answer()


def _since(
    last: _Listed,
    *,
    table: Answers,
    pods: Mapping[ObjectKey, PodRecord],
    seen: Mapping[str, object],
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
    journals: Journals,
    marks: tuple[int, int],
) -> list[Sample] | None:
    """The last answer brought up to date from the journals: only the pods whose record was
    replaced and those of the nodes scraped since are looked at. None when the journals cannot
    tell (more changes than pods, or no longer kept) or a pod is gone or unbound (the caller
    then checks everything). O(changes) + a copy of the answer's list."""
    assert last.marks is not None
    n = len(last.keys)
    keys = journals[0].since(last.marks[0], n)
    nodes = journals[1].since(last.marks[1], n)
    if keys is None or nodes is None:
        return None
    if keys or nodes:
        by_key, by_node = last.where()
        changed = {i for i in map(by_key.get, keys) if i is not None}
        for node in set(nodes):
            changed.update(by_node.get(node, ()))
        records, tokens, samples = last.records, last.tokens, last.samples
        dirty = False
        for i in changed:
            key = last.keys[i]
            record = pods.get(key)
            if record is None or not record.node:
                last.marks = None  # what was updated stays coherent; the next check is whole
                return None
            node = record.node
            token = seen.get(node)
            old = records[i]
            if record is old and token == tokens[i]:
                continue
            if node != old.node:
                last.positions = None  # the pod moved: the node index is rebuilt
            records[i], tokens[i] = record, token
            before = samples[i]
            sample = samples[i] = _one(key, record, token, table, compute)
            if sample is not before:
                dirty = True
                last.missing += (sample is None) - (before is None)
                if last.stamps is not None:
                    last.stamps.replace(
                        None if before is None else before.timestamp,
                        None if sample is None else sample.timestamp,
                    )
        if dirty:
            last.found = (
                cast("list[Sample]", samples.copy())
                if not last.missing
                else [s for s in samples if s is not None]
            )
    last.marks = marks
    return last.answer()


def _one(
    key: ObjectKey,
    pod: PodRecord,
    token: object,
    table: Answers,
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
) -> Sample | None:
    hit = table.get(key)
    if hit is not None and hit[0] is pod and hit[1] == token:
        return hit[3]
    return compute(key, pod, token)


def _each(
    objects: Iterable[ObjectKey],
    table: Answers,
    pods: Mapping[ObjectKey, PodRecord],
    usage: _Usage,
    compute: Callable[[ObjectKey, PodRecord | None, object], Sample | None],
) -> list[Sample]:
    """The per-pod path. O(pods)."""
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


def prune(table: dict[ObjectKey, Any], live: Mapping[ObjectKey, object]) -> None:
    """Drop the entries of objects no longer in `live` once the table holds more than the
    live objects plus the slack (every entry is of an object that existed when it was made).
    O(1) while within; a sweep is O(table) and leaves at most `len(live)` entries, so the next
    one comes `SLACK` insertions later at the earliest: amortised O(1) an insertion."""
    count = len(live)
    if len(table) > count + max(SLACK, count >> 3):
        for key in [key for key in table if key not in live]:
            del table[key]
