"""Watch-event benchmark: how fast the Reflector applies a pod watch stream (issue 3's budget:
50,000 watch events applied in <= 2 s, including the consumer's work).

* wire: the fake kube-apiserver (tests/fakes, in a child process so it has its own core and GIL,
  as a real API server would) streams N ADDED pods (realistic JSON, about 2 KB each), then the
  same N pods MODIFIED, over chunked HTTP to a `Reflector` using the real `KubeClient`, into
  a sink that extracts what the backend's store keeps (namespace, name, labels, nodeName,
  phase). Timed from the first event the sink sees to the last one (the child builds the
  objects before it notifies the watch, so their generation is not timed). The same stream is
  then replayed (a watch from the start version) through `KubeClient.watch` alone, to show
  what transport and JSON decoding cost without the reflector.
* decoded: the same events already decoded, fed through a `Reflector` by an in-memory client,
  into the extracting sink and into a counting sink (the reflector's own overhead), beside
  the sink alone and `orjson.loads` of the lines alone, to attribute the time.

Wall times (`time.perf_counter`) and this process's CPU (`time.process_time`); best of
`--repeat` with the median beside it. The machine's load average is printed before and after:
other work on the same cores inflates wall times.

    python benchmarks/watch_events.py                         # 50,000 pods, 3 repeats
    python benchmarks/watch_events.py --pods 5000 --repeat 1  # quick
    python benchmarks/watch_events.py --server thread         # fake API server in-process
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from custom_metrics_server.kube.client import KubeClient  # noqa: E402
from custom_metrics_server.kube.config import Connection  # noqa: E402
from custom_metrics_server.kube.watcher import Reflector  # noqa: E402

PODS_PATH = "/api/v1/pods"


# ---------------------------------------------------------------------- realistic pods


def make_pod(i: int, *, nodes: int, modified: bool = False) -> dict[str, Any]:
    """A Pod as kube-apiserver sends it (no managedFields), about 2 KB of JSON."""
    namespace = f"team-{i % 50:02d}"
    app = f"service-{i % 400:03d}"
    rs_hash = f"{(i * 2654435761) % 16**10:010x}"
    name = f"{app}-{rs_hash[:10]}-{i:05d}"
    running = modified or i % 10 != 0
    started = "2026-11-20T10:00:00Z"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": f"{app}-{rs_hash[:10]}-",
            "namespace": namespace,
            "uid": f"{i:08x}-1c2d-4e5f-8a9b-{i * 7:012x}"[-36:],
            "creationTimestamp": "2026-11-20T09:59:58Z",
            "labels": {
                "app": app,
                "pod-template-hash": rs_hash[:10],
                "tier": "backend" if i % 3 else "frontend",
                "team": namespace,
            },
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-11-19T08:00:00Z",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-{rs_hash[:10]}",
                    "uid": f"rs-{i % 400:05d}-0000-4000-8000-000000000000",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/{app}:v1.{i % 20}.3",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "imagePullPolicy": "IfNotPresent",
                },
                {
                    "name": "proxy",
                    "image": "registry.example.com/envoy:v1.31.0",
                    "resources": {
                        "requests": {"cpu": "50m", "memory": "64Mi"},
                        "limits": {"memory": "128Mi"},
                    },
                    "imagePullPolicy": "IfNotPresent",
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"node-{i % nodes:04d}",
            "schedulerName": "default-scheduler",
            "priority": 0,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420}}],
        },
        "status": {
            "phase": "Running" if running else "Pending",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": started}
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": f"10.0.{i % 250}.{(i // 250) % 250}",
            "podIP": f"10.244.{i % 250}.{(i // 250) % 250}",
            "startTime": started,
            "containerStatuses": [
                {
                    "name": container,
                    "ready": running,
                    "restartCount": 1 if modified else 0,
                    "image": f"registry.example.com/{container}:v1",
                    "started": running,
                    "state": {"running": {"startedAt": started}},
                }
                for container in ("app", "proxy")
            ],
            "qosClass": "Burstable",
        },
    }


# ---------------------------------------------------------------------- sinks


class ExtractingSink:
    """What the Kubernetes backend's store does at the least: one compact record per pod."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], tuple[Any, str, str]] = {}
        self.events = 0
        self.start_at = 0
        self.target = 0
        self.first_wall = self.first_cpu = self.last_wall = self.last_cpu = 0.0
        self.done = asyncio.Event()

    def window(self, count: int) -> None:
        """Time the next `count` events, from the first one's arrival to the last one."""
        self.start_at = self.events
        self.target = self.events + count
        self.done = asyncio.Event()

    def list_started(self) -> None:
        pass

    def listed(self, obj: dict[str, Any]) -> None:
        self._store(obj)

    def list_finished(self) -> None:
        pass

    def _store(self, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        self.records[(metadata.get("namespace", ""), metadata["name"])] = (
            metadata.get("labels") or {},
            spec.get("nodeName", ""),
            status.get("phase", ""),
        )

    def event(self, type: str, obj: dict[str, Any]) -> None:
        if self.events == self.start_at:
            self.first_wall, self.first_cpu = time.perf_counter(), time.process_time()
        if type == "DELETED":
            metadata = obj["metadata"]
            self.records.pop((metadata.get("namespace", ""), metadata["name"]), None)
        else:
            self._store(obj)
        self.events += 1
        if self.events == self.target:
            self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()
            self.done.set()


class StateSink(ExtractingSink):
    """The real consumer: the backend's `ClusterState` pod sink (resource model included)."""

    def __init__(self) -> None:
        super().__init__()
        from custom_metrics_server.cluster_state.records import PODS, ClusterState

        self.state = ClusterState()
        self._pods = self.state.sink(PODS)
        self.records = self.state.pods  # type: ignore[assignment] # same keys, richer values

    def _store(self, obj: dict[str, Any]) -> None:
        self._pods.event("MODIFIED", obj)


class CountingSink(ExtractingSink):
    """Keeps nothing: what is left is the reflector's own cost."""

    def event(self, type: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if self.events == self.target:
            self.last_wall, self.last_cpu = time.perf_counter(), time.process_time()
            self.done.set()


# ---------------------------------------------------------------------- the fake API server


def serve(pipe: Pipe, pods: int, nodes: int) -> None:
    """Child process (or thread): a fake API server driven by commands over `pipe`."""
    from tests.fakes.kube_apiserver import FakeKubeApiServer, ResourceType

    api = FakeKubeApiServer([ResourceType("", "v1", "pods", "Pod")])
    api.start()
    pipe.send(("ready", api.url, api.resource_version))
    while True:
        command = pipe.recv()
        if command == "added":
            objs = (make_pod(i, nodes=nodes) for i in range(pods))
            api.apply_many("pods", objs, mode="add", copies=False)
        elif command == "modified":
            objs = (make_pod(i, nodes=nodes, modified=True) for i in range(pods))
            api.apply_many("pods", objs, mode="update", copies=False)
        elif command == "watches":
            pass
        elif command == "stop":
            api.close()
            pipe.send(("stopped", 0, 0))
            return
        pipe.send(("ok", api.active_watches(), api.resource_version))


class ServerHandle:
    """The fake API server in a child process or a thread, behind the same pipe protocol."""

    def __init__(self, mode: str, pods: int, nodes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        if mode == "process":
            self.worker: Any = context.Process(target=serve, args=(child, pods, nodes))
        else:
            import threading

            self.worker = threading.Thread(target=serve, args=(child, pods, nodes), daemon=True)
        self.worker.start()
        _, self.url, self.start_rv = self.pipe.recv()

    async def ask(self, command: str) -> tuple[str, int, int]:
        self.pipe.send(command)
        answer: tuple[str, int, int] = await asyncio.to_thread(self.pipe.recv)
        return answer

    async def close(self) -> None:
        await self.ask("stop")
        self.worker.join(timeout=10)


# ---------------------------------------------------------------------- wire benchmark


async def wire_run(pods: int, nodes: int, mode: str, *, state: bool = False) -> dict[str, float]:
    """One run: ADDED then MODIFIED through the Reflector, then a raw-client replay."""
    server = ServerHandle(mode, pods, nodes)
    client = KubeClient(Connection(host=server.url), timeout=60.0)
    sink = StateSink() if state else ExtractingSink()
    reflector = Reflector(client, path=PODS_PATH, sink=sink, name="pods", page_size=500)
    task = asyncio.create_task(reflector.run())
    figures: dict[str, float] = {}
    try:
        for _ in range(1000):  # until listed and watching
            if reflector.synced and (await server.ask("watches"))[1] >= 1:
                break
            await asyncio.sleep(0.01)
        for phase in ("added", "modified"):
            sink.window(pods)
            await server.ask(phase)
            await asyncio.wait_for(sink.done.wait(), 120)
            figures[f"{phase}_wall"] = sink.last_wall - sink.first_wall
            figures[f"{phase}_cpu"] = sink.last_cpu - sink.first_cpu
        assert len(sink.records) == pods, (len(sink.records), pods)
        assert reflector.stats.events == 2 * pods
        if state:
            gc.collect()
            statm = Path("/proc/self/statm").read_text().split()  # noqa: ASYNC240 - procfs, instant
            rss = int(statm[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
            print(
                f"process RSS holding {pods:,} pods in ClusterState: {rss:.1f} MiB", file=sys.stderr
            )
        task.cancel()
        # The same ADDED stream again, straight from KubeClient.watch: transport + decoding.
        params = {"watch": "true", "resourceVersion": str(server.start_rv)}
        seen = 0
        wall, cpu = time.perf_counter(), time.process_time()
        stream = client.watch(PODS_PATH, params, read_timeout=60)
        async for _ in stream:
            if seen == 0:
                wall, cpu = time.perf_counter(), time.process_time()
            seen += 1
            if seen == pods:
                break
        figures["client_only_wall"] = time.perf_counter() - wall
        figures["client_only_cpu"] = time.process_time() - cpu
        await getattr(stream, "aclose")()  # noqa: B009 - typed as a plain AsyncIterator
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.aclose()
        await server.close()
    return figures


# ---------------------------------------------------------------------- decoded benchmark


class DecodedClient:
    """A `ListWatchClient` serving an empty list and then pre-decoded watch events."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.watches = 0

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return {"metadata": {"resourceVersion": "1"}, "items": []}

    async def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        self.watches += 1
        if self.watches > 1:
            await asyncio.Event().wait()
        for event in self.events:
            yield event


async def decoded_run(events: list[dict[str, Any]], sink: ExtractingSink) -> tuple[float, float]:
    sink.window(len(events))
    reflector = Reflector(DecodedClient(events), path=PODS_PATH, sink=sink, name="pods")
    wall, cpu = time.perf_counter(), time.process_time()
    task = asyncio.create_task(reflector.run())
    await sink.done.wait()
    wall, cpu = sink.last_wall - wall, sink.last_cpu - cpu
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return wall, cpu


def timed(function: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - wall, time.process_time() - cpu


# ---------------------------------------------------------------------- report


def summarise(name: str, events: int, samples: list[tuple[float, float]]) -> dict[str, Any]:
    walls = [w for w, _ in samples]
    cpus = [c for _, c in samples]
    best = min(walls)
    return {
        "case": name,
        "events": events,
        "wall_best_s": round(best, 4),
        "wall_median_s": round(statistics.median(walls), 4),
        "cpu_best_s": round(min(cpus), 4),
        "events_per_s": round(events / best) if best else 0,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"| {'case':58} | events | wall best (median) | CPU best | events/s |")
    print(f"|{'-' * 60}|-------:|-------------------:|---------:|---------:|")
    for row in rows:
        wall = f"{row['wall_best_s']:.3f} s ({row['wall_median_s']:.3f})"
        print(
            f"| {row['case']:58} | {row['events']:6} | {wall:>18} | "
            f"{row['cpu_best_s']:6.3f} s | {row['events_per_s']:8} |"
        )


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    pods, nodes, repeat = args.pods, args.nodes, args.repeat
    rows: list[dict[str, Any]] = []

    runs = []
    for _ in range(repeat):
        gc.collect()
        runs.append(await wire_run(pods, nodes, args.server, state=args.state))
    for key, label in [
        ("added", f"wire: ADDED -> Reflector -> extracting sink ({args.server})"),
        ("modified", f"wire: MODIFIED -> Reflector -> extracting sink ({args.server})"),
        ("client_only", "wire: ADDED replay, KubeClient.watch only (no reflector)"),
    ]:
        rows.append(summarise(label, pods, [(r[f"{key}_wall"], r[f"{key}_cpu"]) for r in runs]))

    added = [make_pod(i, nodes=nodes) for i in range(pods)]
    for version, pod in enumerate(added, start=2):
        pod["metadata"]["resourceVersion"] = str(version)
    lines = [orjson.dumps({"type": "ADDED", "object": pod}) for pod in added]
    size = sum(len(line) for line in lines) / len(lines)
    del added
    samples: dict[str, list[tuple[float, float]]] = {}
    for _ in range(repeat):  # each document dropped at once, as the reflector does
        gc.collect()
        samples.setdefault("decode", []).append(
            timed(lambda: [orjson.loads(x) and None for x in lines])
        )
    events = [orjson.loads(line) for line in lines]
    for _ in range(repeat):
        gc.collect()
        alone = ExtractingSink()

        def sink_alone(sink: ExtractingSink = alone) -> None:
            for event in events:
                sink.event("ADDED", event["object"])

        samples.setdefault("sink", []).append(timed(sink_alone))
        samples.setdefault("reflector", []).append(await decoded_run(events, ExtractingSink()))
        samples.setdefault("overhead", []).append(await decoded_run(events, CountingSink()))
    rows += [
        summarise("decoded: Reflector -> extracting sink", pods, samples["reflector"]),
        summarise(
            "decoded: Reflector -> counting sink (reflector overhead)", pods, samples["overhead"]
        ),
        summarise("decoded: extracting sink alone (no reflector)", pods, samples["sink"]),
        summarise("orjson.loads of the event lines alone", pods, samples["decode"]),
    ]
    rows[0]["event_bytes_mean"] = round(size)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=50_000, help="events per phase")
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--server", choices=["process", "thread"], default="process")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/*.json")
    parser.add_argument(
        "--state",
        action="store_true",
        help="wire runs feed the real ClusterState (resource model) instead of the light sink",
    )
    args = parser.parse_args()

    if args.state:
        from custom_metrics_server.runtime.heap import tune_gc

        tune_gc()  # as `serve` does
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if args.loop == "uvloop":
        import uvloop

        rows = uvloop.run(main_async(args))
    else:
        rows = asyncio.run(main_async(args))
    load_after = os.getloadavg()

    print(
        f"\nwatch events: {args.pods:,} pods on {args.nodes:,} nodes, mean event "
        f"{rows[0]['event_bytes_mean']:,} bytes, best of {args.repeat}, {args.loop} loop, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.2f} before / {load_after[0]:.2f} after\n"
    )
    print_table(rows)
    if args.save:
        report = {
            "time": started,
            "args": vars(args),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": load_after,
            "rows": rows,
        }
        results = ROOT / "benchmarks" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / f"watch_events-{started}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
