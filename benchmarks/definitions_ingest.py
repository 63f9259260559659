"""MetricDefinitions ingest: a list of N definitions in M namespaces through the catalog (the
watch's sink), as the list+watch hands them over, and what the catalog keeps per definition.

    python benchmarks/definitions_ingest.py                     # 10,000 in 3,000 namespaces
    python benchmarks/definitions_ingest.py --definitions 1000 --namespaces 300

In process, without the API server (its list time is the API server's and the reflector's,
measured by benchmarks/watch_events.py): each definition is a decoded object as the watch
hands it, a schedule (a source made at once, no background work) or a `pods` source's spec
refused by the platform's policy (so no watch or scraper is started: their cost is per pod,
not per definition). Prints the wall and CPU time of the list (every `listed` decides its
namespace again), per definition, one modification event in a full catalog, and the memory
the catalog holds per definition (tracemalloc).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from typing import Any

from custom_metrics_server.backends.definitions.catalog import Catalog
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceTools


def definition(index: int, namespaces: int) -> dict[str, Any]:
    namespace = f"team-{index % namespaces}"
    if index % 2:
        source: dict[str, Any] = {
            "type": "Schedule",
            "schedule": {
                "timeZone": "Europe/Paris",
                "windows": [{"days": ["Mon"], "start": "08:00", "end": "19:00", "value": index}],
                "defaultValue": 1,
            },
        }
    else:
        source = {
            "type": "Pods",
            "pods": {
                "selector": {"matchLabels": {"app": f"web-{index}"}},
                "port": 9090,
                "metric": "inflight",
            },
        }
    return {
        "apiVersion": "metrics.custom-metrics-server.io/v1alpha1",
        "kind": "MetricDefinition",
        "metadata": {
            "name": f"d-{index}",
            "namespace": namespace,
            "uid": f"uid-{index}",
            "creationTimestamp": f"2026-12-01T10:{index % 60:02d}:00Z",
            "generation": 1,
            "resourceVersion": str(1000 + index),
        },
        "spec": {
            "metricName": f"metric_{index % 7}_{index}",
            "servedAs": {"type": "External"},
            "source": source,
            "interval": "30s",
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--definitions", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=3_000)
    options = parser.parse_args()
    objects = [definition(i, options.namespaces) for i in range(options.definitions)]
    platform = Platform(allowed=frozenset({"Schedule"}), limits=Limits(definitions=100))
    tools = SourceTools(client=None, external_value=lambda namespace, metric, now: None)

    def ingest() -> Catalog:
        catalog = Catalog(platform, {"Schedule": make_schedule}, tools)
        catalog.list_started()
        for obj in objects:
            catalog.listed(obj)
        catalog.list_finished()
        return catalog

    wall, cpu = time.perf_counter(), time.process_time()
    catalog = ingest()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    # Memory on a second catalog, traced (tracemalloc slows the ingest it watches).
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    traced = ingest()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del traced

    changed = dict(objects[1])
    changed["metadata"] = {**objects[1]["metadata"], "generation": 2}
    event_cpu = time.process_time()
    rounds = 1_000
    for round_ in range(rounds):
        changed["metadata"]["generation"] = 2 + round_
        catalog.event("MODIFIED", changed)
    event_cpu = (time.process_time() - event_cpu) / rounds

    serving = len(catalog.serving)
    count = options.definitions
    print(f"definitions: {count} in {options.namespaces} namespaces ({serving} serving)")
    print(f"list ingest: {wall:.3f} s wall, {cpu:.3f} s CPU, {cpu / count * 1e6:.1f} us CPU each")
    print(f"one MODIFIED event in the full catalog: {event_cpu * 1e6:.1f} us CPU")
    print(f"memory held by the catalog: {held / 2**20:.1f} MiB, {held / count:.0f} B each")


if __name__ == "__main__":
    main()
