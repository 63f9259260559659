"""`/metrics/resources` and `pods/*` in process, old and new in one run (issue 17, items 4, 5).

* exposition: the envelope's world (`tests/fakes/envelope_world.py`: pods on nodes in
  namespaces, owned by workloads, fed through `ClusterState`'s sinks) at 10k, 50k and 150k
  pods; the whole-body renderer (`render_state_exposition`, what the server served before)
  against the streamed one (`stream_state_exposition`, chunks consumed and dropped as the
  server sends them): CPU (`time.process_time`, best of `--repeat`, alternated) and the
  memory allocated at once (tracemalloc peak above the state), and a check that the
  streamed bytes are the old body's (SHA-256).
* pods: one `pods/*` answer over the world's 3,000-pod namespace
  (`kube_running_pod_resource_usage?metricLabelSelector=resource=cpu`, as the envelope's wrk
  phase), through the whole ASGI app in process (chain, routing, backend, JSON body), usage
  from a `UsageStore` fed the fake kubelets' text: CPU ms per answer with the memoised
  answers warm (the steady state under `wrk`) and cold (after a usage round).

    python benchmarks/resources_exposition.py                 # 10k, 50k, 150k (~3 min)
    python benchmarks/resources_exposition.py --pods 150000   # one scale
    python benchmarks/resources_exposition.py --smoke         # 3,000 pods, one repeat
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custom_metrics_server.backends.kubernetes.state_exposition import (  # noqa: E402
    render_state_exposition,
    stream_state_exposition,
)
from custom_metrics_server.cluster_state.records import (  # noqa: E402
    NAMESPACES,
    NODES,
    PODS,
    WATCHED,
    ClusterState,
)
from custom_metrics_server.domain import GroupResource  # noqa: E402
from tests.fakes.envelope_world import (  # noqa: E402
    WorldPlan,
    make_node,
    make_pod,
    namespace_name,
    plan_world,
    scale_shape,
    workload_objects,
)


def build_state(pods: int) -> tuple[ClusterState, WorldPlan]:
    """The envelope world (namespaces, nodes, workloads, pods) in a `ClusterState`."""
    plan = plan_world(scale_shape(pods))
    state = ClusterState()
    shape = plan.shape
    workloads: dict[GroupResource, list[dict[str, Any]]] = {gr: [] for gr in WATCHED}
    for resource, obj in workload_objects(plan):
        name, _, group = resource.partition(".")
        workloads[GroupResource(group, name)].append(obj)
    for gr, objects in (
        (NAMESPACES, ({"metadata": {"name": namespace_name(i)}} for i in range(shape.namespaces))),
        (NODES, (make_node(i) for i in range(shape.nodes))),
        *(
            (gr, iter(objs))
            for gr, objs in workloads.items()
            if gr not in (PODS, NODES, NAMESPACES)
        ),
        (PODS, (make_pod(plan, i) for i in range(len(plan.pods)))),
    ):
        sink = state.sink(gr)
        sink.list_started()
        for obj in objects:
            sink.listed(obj)
        sink.list_finished()
    return state, plan


def _old(state: ClusterState) -> Iterable[bytes]:
    return (render_state_exposition(state),)


def _new(state: ClusterState) -> Iterable[bytes]:
    return stream_state_exposition(state)


def _gzip(state: ClusterState) -> Iterable[bytes]:
    from custom_metrics_server.server.streaming import gzipped

    return gzipped(stream_state_exposition(state))


def _consume(chunks: Iterable[bytes]) -> tuple[int, int, str]:
    """(bytes, chunks, sha256) of a body, each chunk dropped once hashed (as sent)."""
    digest = hashlib.sha256()
    size = count = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        count += 1
    return size, count, digest.hexdigest()


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure_exposition(state: ClusterState, repeat: int) -> dict[str, Any]:
    """Old and new, alternated: best CPU, tracemalloc peak, size, chunks, same bytes."""
    variants: dict[str, Callable[[ClusterState], Iterable[bytes]]] = {
        "old": _old,
        "new": _new,
        "gzip": _gzip,
    }
    out: dict[str, Any] = {name: {"cpu_s": []} for name in variants}
    # RSS growth of the first render of each (new ones first: the old one's freed 5x-the-body
    # garbage would hide theirs), as the server's RSS grew with its first scrape.
    for name in ("new", "gzip", "old"):
        gc.collect()
        before = _rss_mib()
        _consume(variants[name](state))
        gc.collect()
        out[name]["rss_growth_mib"] = round(_rss_mib() - before, 1)
    for _ in range(repeat):
        for name, render in variants.items():
            gc.collect()
            started = time.process_time()
            size, count, digest = _consume(render(state))
            out[name]["cpu_s"].append(time.process_time() - started)
            out[name].update(bytes=size, chunks=count, sha256=digest)
    for name, render in variants.items():
        gc.collect()
        tracemalloc.start(1)
        base = tracemalloc.get_traced_memory()[0]
        _consume(render(state))
        out[name]["peak_mib"] = round((tracemalloc.get_traced_memory()[1] - base) / 2**20, 1)
        tracemalloc.stop()
        runs = out[name]["cpu_s"]
        out[name]["cpu_best_s"] = round(min(runs), 3)
        out[name]["cpu_s"] = [round(r, 3) for r in runs]
    out["same_bytes"] = out["old"]["sha256"] == out["new"]["sha256"]
    return out


PODS_PATH = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/kube_running_pod_resource_usage"
)


def _scope(path: str, query: bytes, accept: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:6443"), (b"accept", accept)],
        "server": ("127.0.0.1", 6443),
        "client": ("127.0.0.1", 40000),
    }


async def _answers(app: Any, scope: dict[str, Any], count: int) -> tuple[float, int, bytes]:
    """CPU seconds of `count` answers; the status and body of the last."""
    status = 0
    body = b""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            body = message.get("body", b"")

    started = time.process_time()
    for _ in range(count):
        await app(dict(scope, headers=list(scope["headers"])), receive, send)
    return time.process_time() - started, status, body


async def _old_fetch(self: Any, request: Any) -> Any:
    """`ResourceMetricsBackend.fetch` as it was before issue 17 (5f0a28e^), verbatim: every
    answer validated by the usage store's generation."""
    from custom_metrics_server.backends.kubernetes import metrics as m

    metric = m.ALIASES.get(request.metric.metric, request.metric.metric)
    gr = request.metric.group_resource
    selector = request.metric_selector
    now = float(int(self._clock()))
    if len(self._answers) > m._TABLE_LIMIT:
        self._answers.clear()
    table = self._answers.setdefault((request.metric.metric, gr, selector), {})
    if len(table) > m._CACHE_LIMIT:
        table.clear()
    usage_generation = (
        getattr(self.usage, "generation", 0)
        if metric in (m.USAGE, m.UTILIZATION, m.HPA_UTILIZATION)
        else 0
    )
    state_generation = self.state.generation
    pods = self.state.pods
    records = self.state.inventory.table(gr)
    found: list[Any] = []
    append = found.append
    for key in request.objects:
        source: object = pods.get(key) if gr == m.PODS else state_generation
        hit = table.get(key)
        if (
            hit is not None
            and hit[0] is source
            and hit[1] == usage_generation
            and now - hit[2] < m._FRESH
        ):
            if hit[3] is not None:
                append(hit[3])
            continue
        record = records.get(key)
        if record is None:
            continue
        sample = self._sample(
            name=request.metric.metric,
            metric=metric,
            gr=gr,
            key=key,
            ref=record.ref,
            selector=selector,
            now=now,
        )
        table[key] = (source, usage_generation, now, sample)
        if sample is not None:
            append(sample)
    return found


def _old_joined(head: bytes, items: list[bytes], tail: bytes) -> bytes:
    """`wire`'s list body as it was: three copies of the body."""
    return head + b",".join(items) + tail


def _usage(plan: WorldPlan) -> tuple[Any, Any, float]:
    """The fake kubelets and a `UsageStore` fed two rounds of their text (rates for all)."""
    from custom_metrics_server.kubelet_format.rows import read_usage_rows
    from custom_metrics_server.usage.store import UsageStore
    from tests.fakes.envelope_world import KubeletFarm

    farm = KubeletFarm(plan)
    store = UsageStore()
    now = time.time()
    for at in (now - 15, now):
        for node in farm.nodes:
            body = farm.body(node, at)
            assert body is not None
            store.apply_rows(node, read_usage_rows(body, default_time=at), at)
    return farm, store, now


async def measure_pods(
    state: ClusterState, plan: WorldPlan, count: int, only: str | None = None
) -> dict[str, Any]:
    """CPU ms of one `pods/*` answer over the biggest namespace, JSON and protobuf, old and
    new code alternated on the same state and usage store: warm (no node scraped since the
    last answer) and after one node's scrape (what `wrk` sees: at 10k pods some node is
    scraped every 45 ms, at 150k every 3 ms, and each bumps the store's generation). Old and
    new answers of the same moment are compared byte for byte."""
    from custom_metrics_server.api import wire
    from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend
    from custom_metrics_server.kubelet_format.rows import read_usage_rows
    from custom_metrics_server.server.app import create_app

    farm, store, now = _usage(plan)
    new_fetch, new_joined = ResourceMetricsBackend.fetch, wire._joined
    patches = {"old": (_old_fetch, _old_joined), "new": (new_fetch, new_joined)}
    if only is not None:  # one variant alone: no other's garbage and cache misses in between
        patches = {only: patches[only]}
    apps = {
        name: create_app(cluster=state, backends=[ResourceMetricsBackend(state, store)])
        for name in patches
    }
    namespace = max(
        {pod.namespace for pod in state.pods.values()},
        key=lambda ns: len(state.pods_in_namespace(ns)),
    )
    path = PODS_PATH.format(ns=namespace)
    query = b"metricLabelSelector=resource%3Dcpu"
    nodes = list(farm.nodes)
    turn = [0]

    def scrape_one() -> None:
        """One node scraped again: a later body (counters moved) applied."""
        node = nodes[turn[0] % len(nodes)]
        turn[0] += 1
        at = now + 15 * (1 + turn[0] // len(nodes))
        body = farm.body(node, at)
        assert body is not None
        store.apply_rows(node, read_usage_rows(body, default_time=at), at)

    async def answer(name: str, scope: dict[str, Any]) -> tuple[float, bytes]:
        fetch, joined = patches[name]
        ResourceMetricsBackend.fetch, wire._joined = fetch, joined  # type: ignore[method-assign]
        try:
            seconds, status, body = await _answers(apps[name], scope, 1)
        finally:
            ResourceMetricsBackend.fetch, wire._joined = new_fetch, new_joined  # type: ignore[method-assign]
        assert status == 200, (status, body[:200])
        return seconds, body

    out: dict[str, Any] = {"namespace": namespace, "pods": len(state.pods_in_namespace(namespace))}
    for encoding, accept in (
        ("json", b"application/json"),
        ("protobuf", b"application/vnd.kubernetes.protobuf"),
    ):
        scope = _scope(path, query, accept)
        times: dict[str, dict[str, list[float]]] = {n: {"warm": [], "churn": []} for n in patches}
        bodies: dict[str, bytes] = {}
        same = True
        for name in patches:
            await answer(name, scope)
        for _ in range(count):
            for phase in ("warm", "churn"):
                for name in patches:
                    seconds, bodies[name] = await answer(name, scope)
                    times[name][phase].append(seconds)
                same = same and len(set(bodies.values())) == 1
                if phase == "warm":
                    scrape_one()
        out[encoding] = {"bytes": len(next(iter(bodies.values()))), "same_bytes": same}
        for name, runs in times.items():
            out[encoding][name] = {
                phase: {
                    "best_ms": round(min(values) * 1e3, 3),
                    "median_ms": round(statistics.median(values) * 1e3, 3),
                }
                for phase, values in runs.items()
            }
    return out


def machine() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {load}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, action="append", help="world size (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="3,000 pods, one repeat")
    parser.add_argument(
        "--pods-answers", type=int, default=200, help="pods/* answers per variant (0: skip)"
    )
    parser.add_argument(
        "--pods-only", choices=("old", "new"), help="pods/*: measure one variant alone"
    )
    args = parser.parse_args()
    scales = [3000] if args.smoke else (args.pods or [10_000, 50_000, 150_000])
    repeat = 1 if args.smoke else args.repeat
    print(f"machine: {machine()}; python {platform.python_version()}")
    print(
        "| pods | old CPU s | new CPU s | new + gzip CPU s | old peak MiB | new peak MiB "
        "| gzip peak MiB | RSS growth MiB old / new / gzip | body MB | gzipped MB | chunks |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    for pods in scales:
        state, _ = build_state(pods)
        result = measure_exposition(state, repeat)
        old, new, gz = result["old"], result["new"], result["gzip"]
        print(
            f"| {pods:,} | {old['cpu_best_s']} {old['cpu_s']} | {new['cpu_best_s']} "
            f"{new['cpu_s']} | {gz['cpu_best_s']} {gz['cpu_s']} | {old['peak_mib']} | "
            f"{new['peak_mib']} | {gz['peak_mib']} | {old['rss_growth_mib']} / "
            f"{new['rss_growth_mib']} / {gz['rss_growth_mib']} | {new['bytes'] / 1e6:.1f} | "
            f"{gz['bytes'] / 1e6:.2f} | {new['chunks']} |"
        )
        if not result["same_bytes"]:
            print(f"  DIFFERENT BYTES at {pods} pods", file=sys.stderr)
            failed = True
        del state
        gc.collect()
    if args.pods_answers:
        # The envelope's 10k-pod proportions with a 3,000-pod namespace (12,000 pods).
        state, plan = build_state(400 if args.smoke else 12_000)
        answers = asyncio.run(
            measure_pods(state, plan, 5 if args.smoke else args.pods_answers, args.pods_only)
        )
        print(f"\npods/* over {answers['namespace']} ({answers['pods']} pods), CPU ms an answer:")
        print(
            "| body | bytes | same bytes | old warm | new warm | old after a scrape | new after a scrape |"
        )
        print("|---|---|---|---|---|---|---|")
        for name in ("json", "protobuf"):
            a = answers[name]
            cells = [
                f"{a[v][p]['best_ms']} (median {a[v][p]['median_ms']})" if v in a else "-"
                for p in ("warm", "churn")
                for v in ("old", "new")
            ]
            print(
                f"| {name} | {a['bytes']:,} | {a['same_bytes']} | {cells[0]} | {cells[1]} | "
                f"{cells[2]} | {cells[3]} |"
            )
            failed = failed or not a["same_bytes"]
    print(f"load after: {machine()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
