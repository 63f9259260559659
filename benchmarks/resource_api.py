"""metrics.k8s.io benchmark (issue 7): a `pods` list over ~10,000 pods, in JSON.

    python benchmarks/resource_api.py                 # 10,000 running pods with usage
    python benchmarks/resource_api.py --pods 2000     # smaller
    python benchmarks/resource_api.py --repeat 20

The simulated cluster (the demo's world and kubelet expositions, through the real parser and
usage store) is built once; then, best and median of `--repeat` runs, in one process:

* `cold`: the body right after every node was scraped again (nothing memoised: each pod's
  usage and item parts are recomputed); the scrape itself is not timed;
* `document`: the JSON-shaped PodMetricsList of every namespace (`ResourceMetricsApi.document`),
  warm (usage unchanged since the previous request, only metadata rebuilt);
* `render`: the same plus the Go-compatible encoding (the response body);
* `asgi`: the whole `/apis` handler in process (routing, negotiation, render, send), no socket;
* `nodes`: the NodeMetricsList, and `table`: the pods list as a meta.k8s.io/v1 Table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from custom_metrics_server.api.grammar import parse_query
from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.metrics_api.request import MetricsApiRequest, parse_request
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi
from custom_metrics_server.server.app import AppSettings, create_app
from tests.asgi import call, scope_for


def timed(function: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(best, median) wall seconds of `repeat` calls."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        runs.append(time.perf_counter() - started)
    return min(runs), statistics.median(runs)


def timed_cold(
    simulated: SimulatedCluster, function: Callable[[], Any], repeat: int
) -> tuple[float, float]:
    """(best, median) of `function` right after a fresh scrape of every node."""
    runs = []
    now = time.time()
    for index in range(repeat):
        simulated.scrape(now + 15.0 * (index + 1))
        started = time.perf_counter()
        function()
        runs.append(time.perf_counter() - started)
    return min(runs), statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10_000, help="running pods wanted")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    started = time.perf_counter()
    # The demo world leaves some pods pending or completed: ask for a few more.
    simulated = SimulatedCluster(DemoSettings(pods=int(args.pods * 1.08) + 10, web_pods=1000))
    build = time.perf_counter() - started
    api = ResourceMetricsApi(simulated.cluster, simulated.usage)
    request = parse_request("/apis/metrics.k8s.io/v1beta1/pods", parse_query(""))
    assert request is not None
    document = api.document(request)
    items = len(document["items"])
    body = api.render(request)
    pods = sum(1 for pod in simulated.cluster.pods.values() if pod.lifecycle == "Runnable")
    print(
        f"simulated cluster: {len(simulated.cluster.pods)} pods ({pods} running), "
        f"{len(simulated.cluster.nodes)} nodes, built in {build:.1f}s"
    )
    print(f"pods list: {items} items, {len(body) / 2**20:.2f} MiB of JSON")
    app = create_app(cluster=simulated.cluster, backends=[], settings=AppSettings(metrics_api=api))
    loop = asyncio.new_event_loop()
    scope = scope_for("GET", b"/apis/metrics.k8s.io/v1beta1/pods")

    def through_asgi() -> None:
        reply = loop.run_until_complete(call(app, dict(scope)))
        assert reply.status == 200

    table_request = MetricsApiRequest("pods")
    results = {
        "cold": timed_cold(simulated, lambda: api.render(request), max(3, args.repeat // 3)),
        "document": timed(lambda: api.document(request), args.repeat),
        "render": timed(lambda: api.render(request), args.repeat),
        "asgi": timed(through_asgi, args.repeat),
        "nodes": timed(lambda: api.render(MetricsApiRequest("nodes")), args.repeat),
        "table": timed(lambda: api.render(table_request, "v1"), args.repeat),
    }
    for name, (best, median) in results.items():
        per_item = f"  ({best / max(items, 1) * 1e6:.1f} us/item)" if name != "nodes" else ""
        print(f"{name:>9}: best {best * 1e3:7.1f} ms  median {median * 1e3:7.1f} ms{per_item}")
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
