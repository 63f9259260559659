"""CPU per SubjectAccessReview: httpx (the client as it was: `HttpxClient` of
benchmarks/kube_client.py) against the lean keep-alive pool (`kube.client.KubeClient`), through
the real `Authorizer` on cache
misses; and (`--cache`) the authorization cache at 50,000 HPAs: its memory and the cost of a
`put` once full, the old eviction (a scan of the whole cache) against the new one.

The fake API server (`tests/fakes/auth_webhooks.py`, TLS, every review allowed) runs in a
child process, so the CPU measured here (`time.process_time`) is the client's alone: building
the review, the HTTP round trip, decoding the answer, the cache. Variants alternate in one
process, best of `--rounds`, `--concurrency` reviews in flight (the server's requests do not
wait for each other).

    python benchmarks/review_client.py              # ~1 min
    python benchmarks/review_client.py --cache      # also the cache at 50,000 HPAs
    python benchmarks/review_client.py --smoke      # a few seconds (CI)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kube_client import HttpxClient  # noqa: E402

from custom_metrics_server.kube.client import KubeClient  # noqa: E402
from custom_metrics_server.kube.config import load_connection  # noqa: E402
from custom_metrics_server.security.authn import Identity, identity  # noqa: E402
from custom_metrics_server.security.authz import AccessDecision, Authorizer  # noqa: E402
from custom_metrics_server.security.cache import TtlCache  # noqa: E402
from custom_metrics_server.security.requestinfo import RequestAttributes  # noqa: E402

FAKE = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from tests.fakes.auth_webhooks import FakeAuthApiServer
with FakeAuthApiServer() as fake:
    fake.allow_all = True
    fake.write_kubeconfig(Path({kubeconfig!r}))
    print("ready", flush=True)
    sys.stdin.read()
"""


def hpa_identity() -> Identity:
    """The HPA controller as the front proxy presents it (no uid, no extra)."""
    return identity(
        "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
        ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
        "",
        {},
    )


def attributes(i: int) -> RequestAttributes:
    """The i-th HPA's Object query: a distinct workload name per HPA."""
    namespace, name = f"ns-{i % 3000:04d}", f"deploy-{i:05d}"
    return RequestAttributes(
        resource_request=True,
        path=f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{namespace}/deployments.apps/"
        f"{name}/kube_running_pod_resource_usage",
        verb="get",
        group="custom.metrics.k8s.io",
        version="v1beta2",
        namespace=namespace,
        resource="deployments.apps",
        subresource="kube_running_pod_resource_usage",
        name=name,
    )


async def cpu_per_review(
    authorizer: Authorizer, caller: Identity, first: int, count: int, concurrency: int
) -> float:
    """CPU seconds per `authorize` on `count` distinct attributes (all cache misses)."""
    queue = iter(range(first, first + count))

    async def worker() -> None:
        for i in queue:
            await authorizer.authorize(caller, attributes(i))

    gc.collect()
    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - start) / count


async def compare(kubeconfig: Path, count: int, rounds: int, concurrency: int) -> dict[str, Any]:
    connection = load_connection(str(kubeconfig))
    http = HttpxClient(connection)
    lean = KubeClient(connection)
    caller = hpa_identity()
    variants = {"httpx": Authorizer(http), "lean": Authorizer(lean)}
    best: dict[str, float] = {}
    first = 0
    try:
        for authorizer in variants.values():  # warm: connections, imports
            await cpu_per_review(authorizer, caller, first, concurrency * 4, concurrency)
            first += concurrency * 4
        for _ in range(rounds):
            for name, authorizer in variants.items():
                seconds = await cpu_per_review(authorizer, caller, first, count, concurrency)
                first += count
                best[name] = min(best.get(name, seconds), seconds)
    finally:
        await lean.aclose()
        await http.aclose()
    reviews = {name: a.reviews for name, a in variants.items()}
    return {
        "cpu_us_per_review": {k: round(v * 1e6, 1) for k, v in best.items()},
        "reviews": reviews,
    }


def old_put(cache: TtlCache[Any, Any], key: Any, value: Any, ttl: float) -> None:
    """The eviction before this change: once full, a scan of every entry for expired ones."""
    entries = cache._entries
    entries.pop(key, None)
    if len(entries) >= cache._capacity:
        now = cache._clock()
        for stale in [k for k, (expiry, _) in entries.items() if expiry <= now]:
            del entries[stale]
        while len(entries) >= cache._capacity:
            del entries[next(iter(entries))]
    entries[key] = (cache._clock() + ttl, value)


def cache_figures(hpas: int, capacity: int) -> dict[str, Any]:
    """Memory of `hpas` HPA-like entries, and a put's CPU once the cache is full."""
    caller = hpa_identity()
    allowed = AccessDecision(allowed=True, denied=False, reason="")
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    cache: TtlCache[tuple[object, ...], AccessDecision] = TtlCache(capacity)
    for i in range(hpas):
        cache.put((caller.key, attributes(i)), allowed, 300.0)
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    out: dict[str, Any] = {
        "hpas": hpas,
        "capacity": capacity,
        "mib": round(size / 2**20, 1),
        "bytes_per_entry": round(size / hpas),
    }
    puts: dict[str, float] = {}
    for name, put in (("old", old_put), ("new", TtlCache.put)):
        full: TtlCache[int, int] = TtlCache(capacity)
        for i in range(capacity):
            full.put(i, i, 300.0)
        start = time.process_time()
        for i in range(capacity, capacity + 200):
            put(full, i, i, 300.0)  # type: ignore[operator]
        puts[name] = (time.process_time() - start) / 200
    out["put_when_full_us"] = {k: round(v * 1e6, 2) for k, v in puts.items()}
    return out


def start_fake(workdir: Path) -> tuple[subprocess.Popen[str], Path]:
    kubeconfig = workdir / "kubeconfig"
    code = FAKE.format(root=str(ROOT), kubeconfig=str(kubeconfig))
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError("the fake API server did not start")
    return process, kubeconfig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="reviews per variant and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--cache", action="store_true", help="the cache at 50,000 HPAs too")
    parser.add_argument("--smoke", action="store_true", help="a few seconds (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.count, args.rounds, args.cache = 100, 1, True
    load: Callable[[], str] = lambda: " ".join(f"{x:.2f}" for x in os.getloadavg())  # noqa: E731
    print(f"load before: {load()}")
    with tempfile.TemporaryDirectory(prefix="review-client-") as tmp:
        process, kubeconfig = start_fake(Path(tmp))
        try:
            # uvloop, as the server runs (uvicorn's loop="auto").
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                result = runner.run(compare(kubeconfig, args.count, args.rounds, args.concurrency))
        finally:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=10)
    print(f"load after: {load()}")
    per = result["cpu_us_per_review"]
    print(
        f"CPU per SubjectAccessReview (Authorizer on cache misses, {args.concurrency} in flight, "
        f"best of {args.rounds} x {args.count}): httpx {per['httpx']} µs, lean {per['lean']} µs "
        f"({per['httpx'] / per['lean']:.1f}x); reviews made {result['reviews']}"
    )
    expected = args.count * args.rounds + args.concurrency * 4
    if any(n != expected for n in result["reviews"].values()):
        print(f"FAILED: expected {expected} reviews per variant")
        return 1
    if args.cache:
        hpas = 2_000 if args.smoke else 50_000
        figures = cache_figures(hpas, 65_536)
        print(
            f"authorization cache, {figures['hpas']:,} HPA entries: {figures['mib']} MiB "
            f"({figures['bytes_per_entry']} B an entry); a put when full "
            f"(capacity {figures['capacity']:,}): old {figures['put_when_full_us']['old']} µs, "
            f"new {figures['put_when_full_us']['new']} µs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
