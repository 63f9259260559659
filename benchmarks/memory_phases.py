"""What each phase of the envelope leaves in memory, in process (issue 17, item 3).

The envelope's world (`tests/fakes/envelope_world.py`) in a `ClusterState` fed through its
sinks, usage from a `UsageStore` fed the fake kubelets' text, the whole ASGI app in process
(chain, routing, backend, body; no authentication), and then the envelope's later phases
replayed at their rates but as fast as the CPU allows:

* `events`: a minute of 1,000 pod MODIFIED events/s (the world's own: a container's restart
  count and the Ready condition's transition time), with the 4 scrape rounds of that minute;
* `hpa`: a minute of the 5,000 HPAs' queries (333 a second, the envelope's paths), with that
  minute's events and scrape rounds interleaved;
* `wrk`: `pods/*` over the big namespace, 200 answers, with events and scrapes interleaved.

After each: a full collection, tracemalloc's traced total, the lines that grew most since the
phase before (`tracemalloc` snapshot diff), and this process's RSS: what the traced total
does not explain is the allocator's (free memory not returned to the system).

    python benchmarks/memory_phases.py --pods 10000      # ~2 min
    python benchmarks/memory_phases.py --smoke           # 1,200 pods, short phases
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from envelope import hpa_paths, memory_mib  # noqa: E402
from resources_exposition import _answers, _scope, build_state, machine  # noqa: E402

from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend  # noqa: E402
from custom_metrics_server.cluster_state.records import PODS  # noqa: E402
from custom_metrics_server.kubelet_format.rows import read_usage_rows  # noqa: E402
from custom_metrics_server.usage.store import UsageStore  # noqa: E402
from tests.fakes.envelope_world import KubeletFarm, make_pod  # noqa: E402


class World:
    """The cluster changing at the envelope's rates: pod events and node scrapes per second
    of simulated time (`advance`)."""

    def __init__(self, pods: int, event_rate: float, interval: float) -> None:
        self.state, self.plan = build_state(pods)
        self.farm = KubeletFarm(self.plan)
        self.store = UsageStore()
        self.nodes = list(self.farm.nodes)
        self.event_rate, self.interval = event_rate, interval
        self.now = time.time()
        self.objects = [make_pod(self.plan, i) for i in range(len(self.plan.pods))]
        self.sink = self.state.sink(PODS)
        self.events = self.scrapes = 0
        self._due_events = self._due_scrapes = 0.0
        for _ in range(2):  # two rounds: every pod has a rate
            for node in self.nodes:
                self._scrape(node)
            self.now += interval

    def _scrape(self, node: str) -> None:
        body = self.farm.body(node, self.now)
        assert body is not None
        self.store.apply_rows(node, read_usage_rows(body, default_time=self.now), self.now)
        self.scrapes += 1

    def _event(self) -> None:
        # As the world's `EventStream._modified`: new status dicts, the rest shared.
        index = self.events % len(self.objects)
        stored = self.objects[index]
        status = dict(stored["status"])
        statuses = [dict(c) for c in status["containerStatuses"]]
        statuses[self.events % 2]["restartCount"] = (
            statuses[self.events % 2].get("restartCount", 0) + 1
        )
        status["containerStatuses"] = statuses
        conditions = [dict(c) for c in status["conditions"]]
        conditions[1]["lastTransitionTime"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.now)
        )
        status["conditions"] = conditions
        obj = self.objects[index] = {**stored, "status": status}
        self.sink.event("MODIFIED", obj)
        self.events += 1

    def advance(self, seconds: float) -> None:
        """`seconds` of the world: its events and the scrapes due in them."""
        self.now += seconds
        self._due_events += seconds * self.event_rate
        self._due_scrapes += seconds * len(self.nodes) / self.interval
        while self._due_events >= 1:
            self._due_events -= 1
            self._event()
        while self._due_scrapes >= 1:
            self._due_scrapes -= 1
            self._scrape(self.nodes[self.scrapes % len(self.nodes)])


def _split(path: str) -> tuple[str, bytes]:
    path, _, query = path.partition("?")
    return path, query.encode()


def _grown(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int) -> list[str]:
    stats = after.compare_to(before, "lineno")
    stats.sort(key=lambda s: s.size_diff, reverse=True)
    root = str(ROOT) + "/"
    return [
        f"{s.size_diff / 2**20:+8.2f} MiB {s.count_diff:+9,d} objects  "
        f"{str(s.traceback[0]).replace(root, '')}"
        for s in stats[:top]
        if s.size_diff > 0
    ]


async def run(args: argparse.Namespace) -> None:
    from custom_metrics_server.server.app import create_app

    tracemalloc.start(1)
    world = World(args.pods, args.event_rate, args.interval)
    app = create_app(
        cluster=world.state, backends=[ResourceMetricsBackend(world.state, world.store)]
    )
    hpa = [_split(p) for p in hpa_paths({"hpa_targets": world.plan.hpa_targets()})]
    big = "ns-0000"  # the big namespace (`namespace_name(0)`)
    wrk = _split(
        f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{big}/pods/*/"
        "kube_running_pod_resource_usage?metricLabelSelector=resource%3Dcpu"
    )
    accept = b"application/json"

    async def ask(path: str, query: bytes) -> None:
        _, status, _ = await _answers(app, _scope(path, query, accept), 1)
        assert status in (200, 404), (path, status)

    async def events() -> None:
        for _ in range(int(args.seconds)):
            world.advance(1.0)

    async def hpa_load() -> None:
        step = 1.0 / args.hpa_rate
        for i in range(int(args.seconds * args.hpa_rate)):
            await ask(*hpa[i % len(hpa)])
            world.advance(step)

    async def wrk_load() -> None:
        for _ in range(args.wrk_answers):
            await ask(*wrk)
            world.advance(0.1)  # wrk answered ~10 a second a connection

    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    print(f"{args.pods:,} pods; {machine()}")
    print(
        f"start: traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB, {memory_mib('self')}"
    )
    for name, phase in (
        ("events", events),
        ("hpa", hpa_load),
        ("wrk", wrk_load),
        ("events again", events),
    ):
        cpu = time.process_time()
        await phase()
        cpu = time.process_time() - cpu
        gc.collect()
        after = tracemalloc.take_snapshot()
        traced = tracemalloc.get_traced_memory()[0] / 2**20
        memos = sum(len(t) for t in app_backend_tables(app))
        print(
            f"\n## after {name} ({cpu:.1f} s CPU; {world.events:,} events, {world.scrapes:,} "
            f"scrapes so far): traced {traced:.1f} MiB, memo entries {memos:,}, {memory_mib('self')}"
        )
        for line in _grown(snapshot, after, args.top):
            print("  " + line)
        snapshot = after


def app_backend_tables(app: Any) -> list[dict[Any, Any]]:
    """The backends' memo tables, found through the garbage collector (the app does not
    expose its backends)."""
    return [
        table
        for obj in gc.get_objects()
        if isinstance(obj, ResourceMetricsBackend)
        for table in obj._answers.values()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds a phase")
    parser.add_argument("--event-rate", type=float, default=1000.0)
    parser.add_argument("--hpa-rate", type=float, default=333.0)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--wrk-answers", type=int, default=200)
    parser.add_argument("--top", type=int, default=12, help="lines shown per phase")
    parser.add_argument("--smoke", action="store_true", help="1,200 pods, 5 s phases")
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.seconds, args.wrk_answers = 1200, 5.0, 10
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
