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
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custom_metrics_server.compute.metrics import (  # noqa: E402
    render_state_exposition,
    stream_state_exposition,
)
from custom_metrics_server.compute.records import (  # noqa: E402
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


def _consume(chunks: Iterable[bytes]) -> tuple[int, int, str]:
    """(bytes, chunks, sha256) of a body, each chunk dropped once hashed (as sent)."""
    digest = hashlib.sha256()
    size = count = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        count += 1
    return size, count, digest.hexdigest()


def measure_exposition(state: ClusterState, repeat: int) -> dict[str, Any]:
    """Old and new, alternated: best CPU, tracemalloc peak, size, chunks, same bytes."""
    variants: dict[str, Callable[[ClusterState], Iterable[bytes]]] = {"old": _old, "new": _new}
    out: dict[str, Any] = {name: {"cpu_s": []} for name in variants}
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


async def measure_pods(state: ClusterState, plan: WorldPlan, count: int) -> dict[str, Any]:
    """CPU ms of one `pods/*` answer over the biggest namespace, JSON and protobuf: warm
    (usage unchanged since the last answer) and after one node's usage changed (what `wrk`
    sees: some node is scraped every few ms, which bumps the store's generation)."""
    from custom_metrics_server.compute.kubelet_reader import parse_resource_metrics
    from custom_metrics_server.compute.metrics import ResourceMetricsBackend
    from custom_metrics_server.compute.usage import UsageStore
    from custom_metrics_server.server.app import create_app
    from tests.fakes.envelope_world import KubeletFarm

    farm = KubeletFarm(plan)
    store = UsageStore()
    now = time.time()
    for at in (now - 15, now):
        for node in farm.nodes:
            body = farm.body(node, at)
            assert body is not None
            store.apply(node, parse_resource_metrics(body, default_time=at), at)
    backend = ResourceMetricsBackend(state, store)
    app = create_app(cluster=state, backends=[backend])
    namespace = max(
        {pod.namespace for pod in state.pods.values()},
        key=lambda ns: len(state.pods_in_namespace(ns)),
    )
    path = PODS_PATH.format(ns=namespace)
    query = b"metricLabelSelector=resource%3Dcpu"
    # One node re-scraped between two answers: a later body (counters moved) applied.
    nodes = list(farm.nodes)
    turn = [0]

    def scrape_one() -> None:
        node = nodes[turn[0] % len(nodes)]
        turn[0] += 1
        at = now + 15 * (1 + turn[0] // len(nodes))
        body = farm.body(node, at)
        assert body is not None
        store.apply(node, parse_resource_metrics(body, default_time=at), at)

    out: dict[str, Any] = {"namespace": namespace, "pods": len(state.pods_in_namespace(namespace))}
    for name, accept in (
        ("json", b"application/json"),
        ("protobuf", b"application/vnd.kubernetes.protobuf"),
    ):
        scope = _scope(path, query, accept)
        await _answers(app, scope, 3)
        warm = []
        churn = []
        for _ in range(count):
            seconds, status, body = await _answers(app, scope, 1)
            assert status == 200, (status, body[:200])
            warm.append(seconds)
            scrape_one()
            seconds, _, body = await _answers(app, scope, 1)
            churn.append(seconds)
        out[name] = {
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "warm_ms": round(min(warm) * 1e3, 3),
            "after_a_scrape_ms": round(min(churn) * 1e3, 3),
            "after_a_scrape_median_ms": round(sorted(churn)[len(churn) // 2] * 1e3, 3),
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
    args = parser.parse_args()
    scales = [3000] if args.smoke else (args.pods or [10_000, 50_000, 150_000])
    repeat = 1 if args.smoke else args.repeat
    print(f"machine: {machine()}; python {platform.python_version()}")
    print("| pods | old CPU s | new CPU s | old peak MiB | new peak MiB | body MB | chunks |")
    print("|---|---|---|---|---|---|---|")
    failed = False
    for pods in scales:
        state, _ = build_state(pods)
        result = measure_exposition(state, repeat)
        old, new = result["old"], result["new"]
        print(
            f"| {pods:,} | {old['cpu_best_s']} {old['cpu_s']} | {new['cpu_best_s']} "
            f"{new['cpu_s']} | {old['peak_mib']} | {new['peak_mib']} | "
            f"{new['bytes'] / 1e6:.1f} | {new['chunks']} |"
        )
        if not result["same_bytes"]:
            print(f"  DIFFERENT BYTES at {pods} pods", file=sys.stderr)
            failed = True
        del state
        gc.collect()
    if args.pods_answers:
        # The envelope's 10k-pod proportions with a 3,000-pod namespace (12,000 pods).
        state, plan = build_state(400 if args.smoke else 12_000)
        answers = asyncio.run(measure_pods(state, plan, 5 if args.smoke else args.pods_answers))
        print(f"\npods/* over {answers['namespace']} ({answers['pods']} pods), CPU ms an answer:")
        print("| body | bytes | warm | after one node's scrape (best / median) | sha256 |")
        print("|---|---|---|---|---|")
        for name in ("json", "protobuf"):
            a = answers[name]
            print(
                f"| {name} | {a['bytes']:,} | {a['warm_ms']} | {a['after_a_scrape_ms']} / "
                f"{a['after_a_scrape_median_ms']} | {a['sha256'][:16]} |"
            )
    print(f"load after: {machine()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
