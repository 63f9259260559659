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

Then the status writer (`backends/definitions/status_writer.py`) over the full catalog for
`--minutes` simulated minutes (an injected clock, a round per simulated second, each serving
definition's value refreshed every second as the backend's tick does), against an in-process
stand-in of the API server that accepts every write: status writes per minute from a catalog
whose objects have no status yet (every status urgent), then in the steady state (only
values moving), and the CPU of one round's decision over every definition.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from typing import Any, cast

from custom_metrics_server.backends.definitions.catalog import Catalog
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.backends.definitions.status_writer import StatusWriter
from custom_metrics_server.kube.client import KubeClient


class Accepting:
    """The API server's status subresource, accepting every write (new resourceVersion)."""

    def __init__(self) -> None:
        self.version = 10**6

    async def put_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        return body

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return body


def writes_per_minute(catalog: Catalog, minutes: int) -> tuple[list[int], float]:
    """Status writes in each simulated minute, and the CPU of one round's decision."""
    clock = [1_765_000_000.0]
    writer = StatusWriter(
        cast("KubeClient", Accepting()), catalog, identity="bench", clock=lambda: clock[0]
    )
    per_minute: list[int] = []
    decide = 0.0
    rounds = 0

    async def run() -> None:
        nonlocal decide, rounds
        for _ in range(minutes):
            before = writer.writes
            for _ in range(60):
                now = clock[0]
                for state in catalog.serving.values():  # the backend's tick, in short
                    source = state.source
                    values = source.values(now) if source is not None else []
                    state.next_refresh = now + state.definition.interval
                    state.has_value = bool(values)
                    if values:
                        state.last_value = values[0].value
                        state.last_value_time = now
                        state.value_count = len(values)
                cpu = time.process_time()
                chosen = await writer.due(now)
                decide += time.process_time() - cpu
                rounds += 1
                await asyncio.gather(*(writer._write(state) for state in chosen))
                clock[0] += 1.0
            per_minute.append(writer.writes - before)

    asyncio.run(run())
    return per_minute, decide / rounds


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
    parser.add_argument("--minutes", type=int, default=12, help="of the status writer")
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
    per_minute, decide = writes_per_minute(catalog, options.minutes)
    print(f"status writes per simulated minute: {per_minute}")
    print(f"one status round's decision over every definition: {decide * 1e3:.1f} ms CPU")


if __name__ == "__main__":
    main()
