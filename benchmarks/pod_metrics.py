"""What a pod-metrics scrape round costs (issue 13, item 5): CPU per round for 1,000 pods (target
<= 0.5 s), memory against the series kept, and the exposition reader against prometheus_client.

The pods are real HTTP endpoints in another process (`python -m tests.fakes.pod_endpoints
--api`: one listening port per pod on 127.0.0.1, each answering a Go service's default metrics
plus application counters and a latency histogram, `--series` sample lines, about 17 KB at 200;
counters move at every scrape), with a fake API server holding them as Running pods. This
process runs the real `PodMetricsBackend` (its pod watch, the scraper, the store) on uvloop, as
`serve` does, and measures:

* **CPU per round**: this process's `time.process_time()` over `--rounds` complete rounds
  (after a first round that opens the connections), divided by the rounds, for each selection:
  `few` (2 metrics: 2 series a pod), `app` (the application's request counter, job counter and
  queue gauge: 38 series a pod), `all` (every metric, `*`: about 100 series a pod after the
  skipped buckets and quantiles), and `--source proxy` too (every request through the fake API
  server's pod proxy);
* **memory**: per selection, in a fresh process each (`--memory-run`): tracemalloc's live
  bytes after two rounds, and the process's RSS growth over the same (a separate run without
  tracemalloc), against the series kept; the bytes per series are the growth from `few` to
  each selection over the series it adds (the pod watch, connections and tasks are the same
  in every selection);
* **the reader**: CPU per body of `read_exposition` (the three selections) and of
  `prometheus_client.parser.text_string_to_metric_families` (every sample read), on the same
  200-line body, best of `--repeat`.

    python benchmarks/pod_metrics.py                # 1,000 pods x 200 lines, 4 rounds each
    python benchmarks/pod_metrics.py --smoke        # 100 pods, 2 rounds (make bench-smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import logging
import os
import pstats
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custom_metrics_server.backends.pod_metrics.backend import PodMetricsBackend  # noqa: E402
from custom_metrics_server.backends.pod_metrics.config import (  # noqa: E402
    MetricRule,
    MetricSelection,
)
from custom_metrics_server.backends.pod_metrics.exposition import read_exposition  # noqa: E402
from custom_metrics_server.backends.pod_metrics.settings import (  # noqa: E402
    PodMetricsSettings,
)
from custom_metrics_server.kube.client import KubeClient  # noqa: E402
from custom_metrics_server.kube.config import Connection  # noqa: E402
from tests.fakes.pod_exposition import go_app_body  # noqa: E402

SELECTIONS: dict[str, list[str]] = {
    "few": ["jobs_processed_total", "queue_depth"],
    "app": ["http_requests_total", "jobs_processed_total", "queue_depth"],
    "all": ["*"],
}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def parsers(repeat: int, series: int) -> dict[str, float]:
    """µs of CPU per body: ours per selection, prometheus_client's full parse."""
    from prometheus_client.parser import text_string_to_metric_families

    text = go_app_body(3, 10, series).decode()
    found: dict[str, float] = {}

    def best(name: str, run: Any, count: int) -> None:
        for _ in range(repeat):
            started = time.process_time()
            for _ in range(count):
                run()
            per = 1e6 * (time.process_time() - started) / count
            found[name] = min(found.get(name, per), per)

    for name, names in SELECTIONS.items():
        # A fresh selection each time would not remember label blocks; a scrape config keeps
        # one for its life, so measure the steady state (its second body on).
        selection = MetricSelection([MetricRule(n) for n in names])
        read_exposition(text, selection)
        best(f"ours ({name}: {len(read_exposition(text, selection).samples)} series kept)",
             lambda selection=selection: read_exposition(text, selection), 200)  # fmt: skip
    cold = list(SELECTIONS["app"])
    best("ours (app, labels not remembered)",
         lambda: read_exposition(text, MetricSelection([MetricRule(n) for n in cold])), 100)  # fmt: skip
    best("prometheus_client (every sample)",
         lambda: [s for f in text_string_to_metric_families(text) for s in f.samples], 20)  # fmt: skip
    return {name: round(value, 1) for name, value in found.items()}


async def wait_rounds(backend: PodMetricsBackend, count: int, within: float) -> None:
    counters = backend.scraper.rounds.counters
    target = counters.rounds_completed + count
    deadline = time.monotonic() + within
    while counters.rounds_completed < target:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {counters.rounds_completed} rounds completed")
        await asyncio.sleep(0.05)


async def one_run(
    api: str,
    selection: str,
    *,
    source: str,
    rounds: int,
    interval: float,
    pods: int,
    memory: bool,
    profile: bool = False,
) -> dict[str, Any]:
    settings = PodMetricsSettings.model_validate(
        {
            "source": source,
            "interval": interval,
            "timeout": interval * 0.9,
            "concurrency": 64,
            "metrics": SELECTIONS[selection],
            "scrape": [
                {
                    "name": "bench",
                    "namespaces": ["bench"],
                    "selector": "app=bench",
                    "port": "metrics",
                }
            ],
        }
    )
    gc.collect()
    rss_before = rss()
    if memory:
        tracemalloc.start()
    backend = PodMetricsBackend(
        settings.to_config(), KubeClient(Connection(host=api, token="bench")), name="bench"
    )
    result: dict[str, Any] = {"selection": selection, "source": source}
    async with backend:
        while not backend.ready().ready:  # noqa: ASYNC110 - readiness is polled, as /readyz does
            await asyncio.sleep(0.05)
        await wait_rounds(backend, 1, 10 * interval)  # connections are open now
        if memory:
            await wait_rounds(backend, 1, 10 * interval)
            gc.collect()
            result["traced_bytes"] = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
        else:
            profiler = cProfile.Profile() if profile else None
            started = time.process_time()
            wall = time.monotonic()
            if profiler is not None:
                profiler.enable()
            await wait_rounds(backend, rounds, (rounds + 2) * interval * 3)
            if profiler is not None:
                profiler.disable()
            result["cpu_per_round_s"] = round((time.process_time() - started) / rounds, 4)
            if profiler is not None:
                pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
            result["wall_per_round_s"] = round((time.monotonic() - wall) / rounds, 3)
        stats = backend.scraper.stats()
        result["series_kept"] = backend.scraper.store.series_count()
        result["targets"] = stats.targets
        result["failures"] = dict(stats.failures_by_reason)
        result["overruns"] = stats.rounds_overrun
        result["last_round_s"] = round(stats.last_round_seconds or 0, 2)
        gc.collect()
        result["rss_growth_bytes"] = rss() - rss_before
    if stats.targets != pods:
        raise RuntimeError(f"{stats.targets} targets of {pods} pods")
    return result


def report(results: dict[str, Any], *, smoke: bool) -> None:
    """The results as JSON, then as tables."""
    runs = results["runs"]
    print(json.dumps(results))
    print(f"\n{results['pods']} pods, {results['series_lines']} lines "
          f"({results['body_bytes']:,} bytes) a body; "
          f"load {results['load'][0]} -> {results['load'][1]}")  # fmt: skip
    print("\n| selection | source | series kept | CPU per round | wall per round | failures |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        if "cpu_per_round_s" in run:
            print(f"| {run['selection']} | {run['source']} | {run['series_kept']:,} | "
                  f"{run['cpu_per_round_s'] * 1000:,.0f} ms | {run['wall_per_round_s']:.2f} s | "
                  f"{run['failures'] or 0} |")  # fmt: skip
    print(
        "\n| selection | series kept | traced bytes | RSS growth | per added series (traced, RSS) |"
    )
    print("|---|---|---|---|---|")
    memory = [run for run in runs if "traced_bytes" in run]
    for run in memory:
        base = memory[0]
        added = run["series_kept"] - base["series_kept"]
        per = "-"
        if added:
            traced = (run["traced_bytes"] - base["traced_bytes"]) / added
            grown = (run["rss_growth_bytes"] - base["rss_growth_bytes"]) / added
            per = f"{traced:,.0f} B, {grown:,.0f} B"
        print(f"| {run['selection']} | {run['series_kept']:,} | {run['traced_bytes']:,} | "
              f"{run['rss_growth_bytes']:,} | {per} |")  # fmt: skip
    print("\n| reader | µs of CPU per body |\n|---|---|")
    for name, value in results["reader_us_per_body"].items():
        print(f"| {name} | {value:,.0f} |")
    worst = max(run.get("cpu_per_round_s", 0) for run in runs)
    if not smoke and worst > 0.5:
        print(f"\nover budget: {worst:.3f} s of CPU in a round (target 0.5 s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--series", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--memory-run", choices=sorted(SELECTIONS), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--api", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile",
        choices=sorted(SELECTIONS),
        help="only this selection (direct), under cProfile: the top functions to stderr",
    )
    args = parser.parse_args()
    if args.smoke:
        args.pods, args.rounds, args.interval, args.repeat = 100, 2, 1.0, 1
    logging.basicConfig(stream=open(os.devnull, "w"), level=logging.WARNING)  # noqa: SIM115
    import uvloop

    if args.memory_run:  # one memory run in this fresh process (see the module)
        print(json.dumps(uvloop.run(one_run(
            args.api, args.memory_run, source="direct", rounds=2, interval=args.interval,
            pods=args.pods, memory=args.traced))))  # fmt: skip
        return 0

    results: dict[str, Any] = {"pods": args.pods, "series_lines": args.series, "load": [load()]}
    results["reader_us_per_body"] = parsers(args.repeat, args.series)
    results["body_bytes"] = len(go_app_body(3, 10, args.series))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.pod_endpoints", "--api",
         "--pods", str(args.pods), "--series", str(args.series)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    runs = []
    try:
        assert child.stdout is not None
        api = json.loads(child.stdout.readline())["api"]
        plan = [(name, "direct") for name in SELECTIONS] + [("app", "proxy")]
        if args.profile:
            plan = [(args.profile, "direct")]
        for name, source in plan:
            runs.append(uvloop.run(one_run(
                api, name, source=source, rounds=args.rounds, interval=args.interval,
                pods=args.pods, memory=False, profile=bool(args.profile))))  # fmt: skip
        for name in [] if args.profile else SELECTIONS:
            run: dict[str, Any] = {}
            for traced in (False, True):
                found = subprocess.run(
                    [sys.executable, __file__, "--memory-run", name, "--api", api,
                     "--pods", str(args.pods), "--interval", str(args.interval)]
                    + (["--traced"] if traced else []),
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                measured = json.loads(found.stdout.splitlines()[-1])
                if traced:
                    run["traced_bytes"] = measured["traced_bytes"]
                else:
                    run.update(measured)
                    del run["cpu_per_round_s"], run["wall_per_round_s"]
            runs.append(run)
    finally:
        assert child.stdin is not None
        with contextlib.suppress(OSError):
            child.stdin.close()
        child.wait(timeout=30)
    results["runs"] = runs
    results["load"].append(load())
    report(results, smoke=args.smoke)
    return 0


if __name__ == "__main__":
    sys.exit(main())
