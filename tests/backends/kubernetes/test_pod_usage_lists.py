"""Tests for the whole-list memo of `pods/*` usage answers (backends.kubernetes.pod_usage_answers, `lists`)
and the encoders' aligned fragments (api.render_cache.fragments): long answers are checked position by
position in C, and every answer is still the one a backend without memory would give."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

from custom_metrics_server.api.render_cache import fragments
from custom_metrics_server.api.wire import metric_value_list
from custom_metrics_server.backends.demo_kubelets import ContainerUsage, kubelet_exposition
from custom_metrics_server.backends.kubernetes.metrics import (
    USAGE,
    UTILIZATION,
    ResourceMetricsBackend,
)
from custom_metrics_server.backends.kubernetes.pod_usage_answers import (
    LIST_MIN,
    pod_usage_samples,
)
from custom_metrics_server.backends.kubernetes.stamp_bounds import StampBounds
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import (
    BackendRequest,
    ItemShape,
    MetricInfo,
    ObjectRef,
    Sample,
    TimedSamples,
)
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.machinery.journal import Journal
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.usage.store import UsageStore

NODE_NAMES = [f"n{i}" for i in range(8)]
PODS_PER_NODE = 12  # 96 pods: above LIST_MIN
assert len(NODE_NAMES) * PODS_PER_NODE >= LIST_MIN


def pod(name: str, node: str, cpu: str = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def placement() -> dict[str, str]:
    return {f"p{n:02d}-{i:02d}": node for n, node in enumerate(NODE_NAMES) for i in range(12)}


def cluster(where: dict[str, str]) -> ClusterState:
    state = ClusterState()
    state.load(
        {
            NAMESPACES: [{"metadata": {"name": "ns"}}],
            NODES: [{"metadata": {"name": n}} for n in NODE_NAMES],
            PODS: [pod(name, node) for name, node in where.items()],
        }
    )
    return state


def scrape(store: UsageStore, where: dict[str, str], node: str, now: float, used: float) -> None:
    containers = [
        ContainerUsage("ns", name, "c", used * (1 + i % 5), 2**20 * (1 + i % 3), 1.0)
        for i, (name, at) in enumerate(sorted(where.items()))
        if at == node
    ]
    body = kubelet_exposition(containers, node_cpu_seconds=used, node_memory=2**30, now=now)
    store.apply_rows(node, read_usage_rows(body, default_time=now), now)


def request(state: ClusterState, metric: str) -> BackendRequest:
    mapping = state.mapping("pods")
    assert mapping is not None
    return BackendRequest(
        metric=MetricInfo(PODS, True, metric),
        mapping=mapping,
        objects=tuple(sorted(state.pods)),
        metric_selector=parse_selector("resource=cpu"),
    )


def scraped_cluster() -> tuple[dict[str, str], ClusterState, UsageStore]:
    """The placement, its state, and a usage store every node has answered twice."""
    where = placement()
    state, store = cluster(where), UsageStore()
    for now, used in ((1000.0, 10.0), (1015.0, 13.0)):
        for node in NODE_NAMES:
            scrape(store, where, node, now, used)
    return where, state, store


def token_sample(key: Any, token: object, value: int = 1) -> Sample:
    """A pod's sample stamped with its usage token (a scrape time)."""
    return Sample(
        described=ObjectRef(kind="Pod", namespace=key[0], name=key[1], api_version="v1"),
        metric="m",
        value=Decimal(value),
        timestamp=float(token),  # type: ignore[arg-type]
    )


async def answer(backend: ResourceMetricsBackend, metric: str) -> list[Sample]:
    return list(await backend.fetch(request(backend.state, metric)))


async def fresh(state: ClusterState, store: UsageStore, metric: str) -> list[Sample]:
    return await answer(ResourceMetricsBackend(state, store, clock=lambda: 5000.0), metric)


async def test_long_answers_match_a_backend_without_memory_through_every_change() -> None:
    where, state, store = scraped_cluster()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    firsts = {}
    for metric in (USAGE, UTILIZATION):
        first = firsts[metric] = await answer(backend, metric)
        assert len(first) == len(where)
        assert first == await fresh(state, store, metric)
        assert backend._lists  # the whole-list path answered
        again = await answer(backend, metric)
        assert all(new is old for new, old in zip(again, first, strict=True))

    # One node scraped: its 12 pods are new samples, the others the same objects.
    scrape(store, where, "n3", 1030.0, 19.0)
    after = await answer(backend, USAGE)
    assert after == await fresh(state, store, USAGE)
    renewed = {
        s.described.name for s, old in zip(after, firsts[USAGE], strict=True) if s is not old
    }
    assert renewed == {name for name, node in where.items() if node == "n3"}

    # A record replaced by a watch event (same node, new request): only it is recomputed.
    state.apply(PODS, pod("p05-03", "n5", cpu="2"))
    changed = await answer(backend, UTILIZATION)
    assert changed == await fresh(state, store, UTILIZATION)

    # A pod added and one deleted (the list of keys differs), a node forgotten.
    state.apply(PODS, pod("p99-new", "n1"))
    where["p99-new"] = "n1"
    state.remove(PODS, ("ns", "p00-00"))
    del where["p00-00"]
    scrape(store, where, "n1", 1045.0, 21.0)
    store.forget_node("n7")
    for metric in (USAGE, UTILIZATION):
        now_answer = await answer(backend, metric)
        assert now_answer == await fresh(state, store, metric)
        assert not any(s.described.name.startswith("p07-") for s in now_answer)

    # A pod bound to no node sends the list through the per-pod path: still the same answer.
    state.apply(PODS, pod("pending", ""))
    assert await answer(backend, USAGE) == await fresh(state, store, USAGE)


def test_the_list_memo_calls_compute_only_for_changed_positions() -> None:
    where, state, store = scraped_cluster()
    computed: list[str] = []
    table: dict[Any, Any] = {}

    def compute(key: Any, record: Any, token: object) -> Sample | None:
        computed.append(key[1])
        value = token_sample(key, token, len(computed))
        table[key] = (record, token, 0.0, value)
        return value

    objects = tuple(sorted(state.pods))
    lists: dict[Any, Any] = {}
    first = pod_usage_samples(objects, table, state.pods, store, compute, lists=lists)
    assert len(computed) == len(objects)
    table.clear()  # the per-pod memo is gone: the list memo alone must answer
    computed.clear()
    assert pod_usage_samples(objects, table, state.pods, store, compute, lists=lists) == first
    assert computed == []
    scrape(store, where, "n2", 1030.0, 20.0)
    third = pod_usage_samples(objects, table, state.pods, store, compute, lists=lists)
    assert sorted(computed) == sorted(n for n, node in where.items() if node == "n2")
    assert [s.timestamp for s in third if s.described.name in computed] == [1030.0] * 12


def _item(name: str) -> Sample:
    return Sample(
        described=ObjectRef(kind="Pod", namespace="ns", name=name, api_version="v1"),
        metric="m",
        value=Decimal(1),
        timestamp=1000.0,
    )


def test_aligned_fragments_reuse_the_last_list_and_encode_only_new_samples() -> None:
    encoded: list[str] = []

    def encode(sample: Sample) -> bytes:
        encoded.append(sample.described.name)
        return sample.described.name.encode()

    samples = [_item(f"p{i}") for i in range(100)]
    out = fragments(samples, "test-aligned", encode)
    assert out == [f"p{i}".encode() for i in range(100)]
    assert len(encoded) == 100
    for sample in samples:
        sample.cache.clear()  # only the aligned memo can avoid encoding now
    encoded.clear()
    out[0] = b"mutated by the caller"
    assert fragments(list(samples), "test-aligned", encode) == [
        f"p{i}".encode() for i in range(100)
    ]
    assert encoded == []
    # The caller reuses its list object with one sample replaced in place.
    samples[42] = _item("new")
    again = fragments(samples, "test-aligned", encode)
    assert encoded == ["new"]
    assert again[42] == b"new"
    assert again[41] == b"p41"
    # A list of another length is encoded sample by sample (through each sample's cache).
    encoded.clear()
    assert fragments(samples[:80], "test-aligned", encode) == again[:80]
    assert len(encoded) == 79  # the samples whose caches were cleared; "new" kept its own


class CountingPods(dict[Any, Any]):
    """The pods mapping, counting the records looked up."""

    looked = 0

    def get(self, key: Any, default: Any = None) -> Any:
        CountingPods.looked += 1
        return super().get(key, default)


def test_with_journals_only_the_changed_pods_are_looked_at() -> None:
    where, state, store = scraped_cluster()
    table: dict[Any, Any] = {}
    computed: list[str] = []

    def compute(key: Any, record: Any, token: object) -> Sample | None:
        computed.append(key[1])
        return token_sample(key, token)

    journals = (state.pod_journal, store.node_journal)
    lists: dict[Any, Any] = {}

    def ask() -> list[Sample]:
        pods = CountingPods(state.pods)
        CountingPods.looked = 0
        return pod_usage_samples(
            tuple(sorted(state.pods)), table, pods, store, compute, lists=lists, journals=journals
        )

    first = ask()
    assert CountingPods.looked == len(where)  # the first answer looks at every pod
    assert ask() == first
    assert CountingPods.looked == 0  # nothing written since: nothing looked at
    scrape(store, where, "n4", 1030.0, 20.0)
    computed.clear()
    after = ask()
    on_n4 = sorted(n for n, node in where.items() if node == "n4")
    assert CountingPods.looked == len(on_n4) == 12
    assert sorted(computed) == on_n4
    assert [s.timestamp for s in after if s.described.name in on_n4] == [1030.0] * 12
    # A record replaced, then moved to another node: looked at, recomputed, re-indexed.
    state.apply(PODS, pod("p01-01", "n1", cpu="3"))
    computed.clear()
    ask()
    assert computed == ["p01-01"]
    assert CountingPods.looked == 1
    state.apply(PODS, pod("p01-02", "n6"))
    where["p01-02"] = "n6"
    ask()
    scrape(store, where, "n6", 1045.0, 30.0)
    computed.clear()
    ask()
    assert "p01-02" in computed
    # More changes than pods since the last answer: everything is compared, as without.
    for i in range(len(where) + 1):
        scrape(store, where, NODE_NAMES[i % 8], 1060.0 + i, 40.0 + i)
    ask()
    assert CountingPods.looked >= len(where)


async def test_journalled_answers_match_a_backend_without_memory_through_random_changes() -> None:
    """Random scrapes, record replacements, moves, forgotten nodes, pods gone pending and back,
    and additions: after each, the answer (through the journals) is the memoryless one."""
    rng = random.Random(1748)
    where, state, store = scraped_cluster()
    backend = ResourceMetricsBackend(state, store, clock=lambda: 5000.0)
    now = 1015.0
    timed = 0
    for step in range(160):
        roll = rng.random()
        name = rng.choice(sorted(where))
        if roll < 0.45:
            now += 1.0
            scrape(store, where, rng.choice(NODE_NAMES), now, now / 50)
        elif roll < 0.6:
            state.apply(PODS, pod(name, where[name], cpu=str(rng.randint(1, 4))))
        elif roll < 0.7:  # recreated elsewhere under its name, once its kubelet let it go
            state.remove(PODS, ("ns", name))
            old, where[name] = where[name], rng.choice(NODE_NAMES)
            now += 1.0
            scrape(store, where, old, now, now / 50)
            state.apply(PODS, pod(name, where[name]))
        elif roll < 0.75:
            store.forget_node(rng.choice(NODE_NAMES))
        elif roll < 0.8:
            state.apply(PODS, pod(name, ""))  # pending for a while: the per-pod path answers
        else:
            added = f"q{step:03d}"
            where[added] = rng.choice(NODE_NAMES)
            state.apply(PODS, pod(added, where[added]))
        for metric in (USAGE, UTILIZATION):
            got = await backend.fetch(request(state, metric))
            assert list(got) == await fresh(state, store, metric), step
            if isinstance(got, TimedSamples):  # the journalled path keeps its bounds
                timed += 1
                stamps = [sample.timestamp for sample in got]
                assert (got.oldest, got.newest) == (min(stamps), max(stamps)), step
        for key, record in list(state.pods.items()):
            if not record.node and rng.random() < 0.5:  # bound again
                state.apply(PODS, pod(key[1], where[key[1]]))
    assert timed > 150  # most answers came through the journals


def test_timestamp_bounds_follow_every_change() -> None:
    rng = random.Random(7)
    stamps: list[float | None] = [float(rng.randint(0, 50)) for _ in range(40)]
    bounds = StampBounds(stamp for stamp in stamps if stamp is not None)
    for _ in range(3000):
        i = rng.randrange(len(stamps))
        new = None if rng.random() < 0.05 else float(rng.randint(0, 80))
        old = stamps[i]
        bounds.replace(old, new)
        stamps[i] = new
        live = [stamp for stamp in stamps if stamp is not None]
        assert bounds.bounds() == ((min(live), max(live)) if live else None)
        if rng.random() < 0.02:  # a sample comes back
            j = rng.randrange(len(stamps))
            if stamps[j] is None:
                stamps[j] = 10.0
                bounds.replace(None, 10.0)
    assert len(bounds.low) <= 2 * len(bounds.counts) + 65  # dead heap entries are bounded


def test_a_journal_tells_what_changed_since_a_position_or_that_it_cannot() -> None:
    journal: Journal[str] = Journal(limit=8)
    assert journal.position == 0
    assert journal.since(0, 100) == []
    for item in "abcde":
        journal.append(item)
    assert journal.position == 5
    assert journal.since(2, 100) == ["c", "d", "e"]
    assert journal.since(2, 2) is None  # more than asked for: check everything instead
    for item in "fghij":  # past the limit: the older half is dropped
        journal.append(item)
    assert journal.position == 10
    assert journal.since(1, 100) is None  # no longer kept
    assert journal.since(6, 100) == ["g", "h", "i", "j"]


def test_a_long_answer_of_the_same_samples_reuses_its_body() -> None:
    samples = [_item(f"p{i:03d}") for i in range(100)]
    kwargs: dict[str, Any] = {
        "api_version": "custom.metrics.k8s.io/v1beta2",
        "shape": ItemShape.V1BETA2,
        "metric_selector": parse_selector(""),
    }
    first = metric_value_list(samples, **kwargs)
    assert metric_value_list(list(samples), **kwargs) is first  # same samples: same body
    changed = samples.copy()
    changed[42] = _item("renamed")
    body = metric_value_list(changed, **kwargs)
    assert body != first
    assert json.loads(body)["items"][42]["describedObject"]["name"] == "renamed"
    assert json.loads(body)["items"][41] == json.loads(first)["items"][41]
    other = metric_value_list(samples, **{**kwargs, "api_version": "custom.metrics.k8s.io/v1beta1"})
    assert b'"apiVersion":"custom.metrics.k8s.io/v1beta1"' in other  # another head, another body
    short = samples[:10]
    assert metric_value_list(short, **kwargs) is not metric_value_list(short, **kwargs)


def test_the_cluster_gives_its_own_strings_for_a_pod_key() -> None:
    state = cluster(placement())
    key = next(iter(state.pods))
    asked = (key[0], "".join(list(key[1])))  # equal, another string object
    assert asked[1] is not state.pods[key].name
    shared = state.pod_key(asked)
    assert shared == key
    assert shared[1] is state.pods[key].name
    assert state.pod_key(("ns", "absent")) == ("ns", "absent")
