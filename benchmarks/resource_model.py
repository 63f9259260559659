"""Resource-model benchmarks (issue 3 targets): memory of the cluster records, the cost of
applying watch events, and the `/metrics/resources` exposition.

    python benchmarks/resource_model.py              # 50,000 pods on ~5,000 nodes
    python benchmarks/resource_model.py --pods 5000  # smaller

Measures, in one fresh process:
* RSS of the server's records for N pods (the JSON is generated first, its RSS subtracted:
  what is left is what the server keeps), and with the usage store filled from kubelet text;
* CPU time to apply N pod watch events (ADDED, then MODIFIED) through the `ClusterState` sinks,
  which run the resource model per pod;
* CPU time of one `/metrics/resources` rendering of N pods (best of 5).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import time
from pathlib import Path

from custom_metrics_server.backends import demo_kubelets, demo_world
from custom_metrics_server.backends.kubernetes.state_exposition import render_state_exposition
from custom_metrics_server.cluster_state.records import PODS, WATCHED, ClusterState
from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.usage.store import UsageStore

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mib() -> float:
    """Resident set size of this process in MiB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE / 2**20


def cpu() -> float:
    """CPU seconds of this process."""
    return time.process_time()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=50_000)
    args = parser.parse_args()
    # demo_world places eight pods a node; 50,000 pods -> 6,250 nodes, about the 5,000 asked.
    world = demo_world.generate(seed=1, pods=args.pods, web_pods=1000)
    pods = world.objects[PODS]
    pod_count = len(pods)
    nodes = len(world.objects[demo_world.NODES])
    gc.collect()
    baseline = rss_mib()

    state = ClusterState()
    started = cpu()
    for resource in WATCHED:
        sink = state.sink(resource)
        sink.list_started()
        for obj in world.objects.get(resource, ()):
            sink.listed(obj)
        sink.list_finished()
    added = cpu() - started
    started = cpu()
    sink = state.sink(PODS)
    for obj in pods:
        sink.event("MODIFIED", obj)
    modified = cpu() - started
    gc.collect()
    records = rss_mib() - baseline

    # Usage: one kubelet exposition per node, twice, through the parser into the store.
    store = UsageStore()
    per_node: dict[str, list[demo_kubelets.ContainerUsage]] = {}
    for obj in pods:
        node = obj["spec"].get("nodeName")
        if node and obj["status"]["phase"] == "Running":
            meta = obj["metadata"]
            for container in obj["spec"]["containers"]:
                per_node.setdefault(node, []).append(
                    demo_kubelets.ContainerUsage(
                        meta["namespace"], meta["name"], container["name"], 10.0, 2**27, 1.0
                    )
                )
    now = time.time()
    parse_time = 0.0
    for step, at in enumerate((now - 15, now)):
        for node, containers in per_node.items():
            rows = [
                dataclasses.replace(c, cpu_seconds=c.cpu_seconds + 1.5 * step) for c in containers
            ]
            body = demo_kubelets.kubelet_exposition(
                rows, node_cpu_seconds=100.0 + step, node_memory=2**33, now=at
            )
            t0 = cpu()
            store.apply_rows(node, read_usage_rows(body, default_time=at), at)
            parse_time += cpu() - t0
    del per_node, body, rows
    gc.collect()
    with_usage = rss_mib() - baseline

    del world, pods, obj
    gc.collect()
    process = rss_mib()

    renders = []
    for _ in range(5):
        t0 = cpu()
        text = render_state_exposition(state)
        renders.append(cpu() - t0)
    series = text.count(b"\n") - 4

    result = {
        "pods": pod_count,
        "nodes": nodes,
        "records_rss_mib": round(records, 1),
        "records_and_usage_rss_mib": round(with_usage, 1),
        "process_rss_mib_after_dropping_the_json": round(process, 1),
        "apply_added_s": round(added, 3),
        "apply_modified_s": round(modified, 3),
        "events_per_s": round(2 * pod_count / (added + modified)),
        "usage_parse_and_apply_s_two_rounds": round(parse_time, 3),
        "exposition_render_s_best_of_5": round(min(renders), 3),
        "exposition_series": series,
        "exposition_bytes": len(text),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
