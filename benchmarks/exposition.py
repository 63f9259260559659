"""Exposition benchmarks: the kubelet ``/metrics/resource`` parser, the usage store and the
KEP-1748 ``/metrics/resources`` renderer (issue 3's budgets: 40,000 container series parsed
in <= 50 ms; 50,000 pods rendered in <= 0.3 s of CPU).

* parse: a generated kubelet body laid out exactly as a kubelet writes it (families in name
  order, HELP/TYPE lines, series sorted by label values, millisecond timestamps, start
  times without one). "40,000 container series" is 10,000 containers in 2,500 pods with
  the four per-container series a Linux kubelet writes (cpu, memory, start time, swap),
  plus the pod and node series; a second row parses 40,000 *containers* (160,000 container
  series) to show how it scales.
* apply: that scrape applied to a ``UsageStore`` holding the node's previous scrape (a rate
  for every container).
* render: 50,000 pods on 5,000 nodes, each with a cpu and a memory request and limit
  (200,000 series), walked in pod order: with ``render_pod_resource_metrics`` from prebuilt
  rows and from per-pod records through generators that build the rows (what the server
  does at scrape time), and with ``stream_pod_resources`` (the server's writer) from the same
  records (one record per pod, no rows), its chunks joined. All three give the same bytes.

Times are process CPU (``time.process_time``), best of N with the median beside it, so
other load on the machine inflates them less than wall time would.

    python benchmarks/exposition.py             # full run
    python benchmarks/exposition.py --repeat 3  # quicker
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from custom_metrics_server.kubelet_format.rows import read_usage_rows
from custom_metrics_server.resources.exposition import (
    PodResourceRow,
    render_pod_resource_metrics,
)
from custom_metrics_server.resources.exposition_stream import stream_pod_resources
from custom_metrics_server.usage.store import UsageStore

TIMESTAMP_MS = 1_700_000_000_000
UNITS = {"cpu": "cores", "memory": "bytes"}


def kubelet_body(pods: int, containers_per_pod: int, *, step: int = 0) -> bytes:
    """A kubelet /metrics/resource body with `pods` x `containers_per_pod` containers;
    `step` advances the counters and timestamps by that many 15 s scrapes."""
    names = sorted(
        (f"namespace-{p % 40:02d}", f"app-{p % 300:03d}-7d9f8b6c5-{p:05d}x") for p in range(pods)
    )
    containers = sorted(
        (f"container-{c}", namespace, pod)
        for namespace, pod in names
        for c in range(containers_per_pod)
    )
    stamp = TIMESTAMP_MS + step * 15_000
    out: list[str] = []
    add = out.append

    def family(name: str, kind: str, help_text: str) -> None:
        add(f"# HELP {name} [STABLE] {help_text}\n# TYPE {name} {kind}\n")

    family("container_cpu_usage_seconds_total", "counter", "Cumulative cpu time")
    for i, (c, ns, pod) in enumerate(containers):
        add(
            f'container_cpu_usage_seconds_total{{container="{c}",namespace="{ns}",pod="{pod}"}}'
            f" {12.5 + i * 0.001731 + step * 1.5:.6f} {stamp + i % 997}\n"
        )
    family("container_memory_working_set_bytes", "gauge", "Current working set")
    for i, (c, ns, pod) in enumerate(containers):
        add(
            f'container_memory_working_set_bytes{{container="{c}",namespace="{ns}",pod="{pod}"}}'
            f" {float(12_000_000 + i * 4096)!r} {stamp + i % 997}\n"
        )
    family("container_start_time_seconds", "gauge", "Start time of the container")
    for i, (c, ns, pod) in enumerate(containers):
        add(
            f'container_start_time_seconds{{container="{c}",namespace="{ns}",pod="{pod}"}}'
            f" {1.6999e9 + i:.10e}\n"
        )
    family("container_swap_usage_bytes", "gauge", "Current amount of the container swap usage")
    for i, (c, ns, pod) in enumerate(containers):
        add(
            f'container_swap_usage_bytes{{container="{c}",namespace="{ns}",pod="{pod}"}}'
            f" 0 {stamp + i % 997}\n"
        )
    family("node_cpu_usage_seconds_total", "counter", "Cumulative cpu time of the node")
    add(f"node_cpu_usage_seconds_total {123456.789 + step * 30} {stamp}\n")
    family("node_memory_working_set_bytes", "gauge", "Current working set of the node")
    add(f"node_memory_working_set_bytes 1.2345678e+10 {stamp}\n")
    family("pod_cpu_usage_seconds_total", "counter", "Cumulative cpu time of the pod")
    for i, (ns, pod) in enumerate(names):
        add(f'pod_cpu_usage_seconds_total{{namespace="{ns}",pod="{pod}"}} {50.25 + i} {stamp}\n')
    family("pod_memory_working_set_bytes", "gauge", "Current working set of the pod")
    for i, (ns, pod) in enumerate(names):
        add(f'pod_memory_working_set_bytes{{namespace="{ns}",pod="{pod}"}} {5.0e7 + i} {stamp}\n')
    family("resource_scrape_error", "gauge", "1 if there was an error")
    add("resource_scrape_error 0\n")
    return "".join(out).encode()


def pod_records(pods: int, nodes: int) -> list[dict[str, Any]]:
    """Per-pod records (what the resource model keeps) with cpu and memory requests and
    limits, in an unsorted order."""
    records = []
    for p in range(pods):
        cpu = (100 + (p % 20) * 50) / 1000
        memory = float((128 + (p % 8) * 64) * 1024 * 1024)
        records.append(
            {
                "namespace": f"team-{p % 97:02d}",
                "name": f"service-{p % 1000:03d}-6b8c9d7f4-{p:06d}",
                "node": f"node-{(p * 7919) % nodes:05d}",
                "scheduler": "default-scheduler",
                "priority": "0" if p % 10 else "1000000",
                "requests": {"cpu": cpu, "memory": memory},
                "limits": {"cpu": cpu * 2, "memory": memory * 2},
            }
        )
    return records


def walk(records: list[dict[str, Any]], which: str) -> Iterator[PodResourceRow]:
    """The rows of every record, built on the fly."""
    for r in records:
        for resource, value in r[which].items():
            yield PodResourceRow(
                r["namespace"],
                r["name"],
                r["node"],
                r["scheduler"],
                r["priority"],
                resource,
                UNITS[resource],
                value,
            )


class PodRecord(NamedTuple):
    """A pod's record as the stream reads it."""

    namespace: str
    name: str
    node: str
    scheduler: str
    priority: str
    metric_requests: dict[str, float]
    metric_limits: dict[str, float]


def pod_resources(records: list[dict[str, Any]]) -> Iterator[PodRecord]:
    """One PodRecord per record, built on the fly."""
    for r in records:
        yield PodRecord(
            r["namespace"],
            r["name"],
            r["node"],
            r["scheduler"],
            r["priority"],
            r["requests"],
            r["limits"],
        )


def streamed(records: list[dict[str, Any]]) -> bytes:
    return b"".join(stream_pod_resources(pod_resources(records), unit=UNITS.__getitem__))


def measure(action: Callable[[], object], repeat: int) -> list[float]:
    """CPU seconds of `repeat` runs of `action` (garbage collection on, as in production)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        action()
        times.append(time.process_time() - start)
    return times


def main() -> None:
    """Run the cases and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs per case (best is shown)")
    args = parser.parse_args()
    few = max(3, args.repeat // 3)

    body = kubelet_body(2_500, 4)
    big = kubelet_body(10_000, 4)
    previous = read_usage_rows(body, default_time=0.0)
    current = read_usage_rows(kubelet_body(2_500, 4, step=1), default_time=15.0)
    records = pod_records(50_000, 5_000)
    requests = list(walk(records, "requests"))
    limits = list(walk(records, "limits"))
    rendered = render_pod_resource_metrics(requests, limits)
    assert streamed(records) == rendered

    check = UsageStore()
    check.apply_rows("node", previous, 0.0)
    check.apply_rows("node", current, 15.0)
    assert check.stats().pods_with_usage == 2_500
    assert len(previous.cpu) == 10_000

    def apply() -> None:
        store = UsageStore()
        store.apply_rows("node", previous, 0.0)
        store.apply_rows("node", current, 15.0)

    cases: list[tuple[str, str, Callable[[], object], float | None, int]] = [
        (
            "parse /metrics/resource",
            f"40,000 container series ({len(body) / 1e6:.1f} MB)",
            lambda: read_usage_rows(body, default_time=0.0),
            0.050,
            args.repeat,
        ),
        (
            "parse /metrics/resource",
            f"160,000 container series ({len(big) / 1e6:.1f} MB)",
            lambda: read_usage_rows(big, default_time=0.0),
            None,
            few,
        ),
        ("UsageStore.apply_rows", "10,000 containers, twice (rates)", apply, None, args.repeat),
        (
            "render /metrics/resources",
            f"50,000 pods, 200,000 series ({len(rendered) / 1e6:.1f} MB), prebuilt rows",
            lambda: render_pod_resource_metrics(iter(requests), iter(limits)),
            0.300,
            few,
        ),
        (
            "render /metrics/resources",
            "the same, rows built from 50,000 records on the fly",
            lambda: render_pod_resource_metrics(walk(records, "requests"), walk(records, "limits")),
            0.300,
            few,
        ),
        (
            "stream_pod_resources",
            "the same from 50,000 records, chunks joined",
            lambda: streamed(records),
            0.300,
            few,
        ),
    ]

    print(f"python {platform.python_version()} on {platform.machine()}, CPU time per run\n")
    print("| case | size | best | median | budget |")
    print("|---|---|---|---|---|")
    for name, size, action, budget, repeat in cases:
        times = measure(action, repeat)
        best, median = min(times), statistics.median(times)
        verdict = ""
        if budget is not None:
            verdict = f"{budget * 1000:.0f} ms " + ("ok" if best <= budget else "OVER")
        print(f"| {name} | {size} | {best * 1000:.1f} ms | {median * 1000:.1f} ms | {verdict} |")


if __name__ == "__main__":
    main()
