"""The request path in process: the whole ASGI app (handler chain, gate, routing, query, body),
no TLS, socket or HTTP parsing, so that small changes of the path show above the noise.

The app is what `serve --demo --demo-pods 1000 --demo-web-pods 1000` builds. Two requests:

* single: one pod's `http_requests_per_second` (v1beta2), CPU µs per request;
* list: `pods/*` with `labelSelector=app=web` (1,000 items), CPU ms per request.

Each figure is the best of `--repeat` batches (CPU time, `time.process_time`). To compare two
trees of the package in one run (before and after a change), give each with `--tree`: every
round runs every tree once, in a fresh child process with that tree first on `sys.path`, rounds
interleaved so that a drift of the machine's load hits all trees alike:

    python benchmarks/in_process.py                              # this tree
    git worktree add /tmp/before HEAD~1
    python benchmarks/in_process.py --tree /tmp/before --tree . --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SINGLE = (
    b"/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/{pod}/http_requests_per_second"
)
LIST = b"/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second"


def _scope(path: bytes, query: bytes = b"") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "https",
        "path": path.decode(),
        "raw_path": path,
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:6443"), (b"accept", b"application/json")],
        "server": ("127.0.0.1", 6443),
        "client": ("127.0.0.1", 40000),
    }


def _module(new: str, old: str) -> Any:
    """`new` if the tree under test has it, else `old` (the layout before a move). Decided by
    the files of the imported package: an editable install's finder would import `new` from
    another tree."""

    import custom_metrics_server

    package = Path(custom_metrics_server.__file__).parent
    for name in (new, old, old.rsplit(".", 1)[-1]):
        if (package / name.replace(".", "/")).with_suffix(".py").exists():
            return importlib.import_module(f"custom_metrics_server.{name}")
    raise ImportError(f"neither {new} nor {old} in {package}")


def _build_app(pods: int) -> Any:
    """The demo app, found where the tree under test keeps it."""
    from custom_metrics_server import cli

    app_module = _module("server.app", "app")
    settings, create_app = app_module.AppSettings, app_module.create_app
    args = cli.build_parser().parse_args(
        ["serve", "--demo", "--demo-pods", str(pods), "--demo-web-pods", str(pods)]
    )
    if not hasattr(cli, "_demo"):  # the backends are loaded as a backends file (plugins/)
        from custom_metrics_server.plugins import flags, loader

        backends, base_dir, _ = flags.backends_from_flags(args)
        loaded = loader.load_backends(backends, base_dir=base_dir, default_timeout=10.0)
        return create_app(
            cluster=loaded.cluster,
            backends=loaded.hosts,
            settings=settings(
                resource_exposition=loaded.exposition,
                metrics_api=flags.server_features(args, loaded),
            ),
        )
    served = cli._demo(args)
    return create_app(
        cluster=served.cluster,
        backends=served.backends,
        settings=settings(resource_exposition=served.exposition, metrics_api=served.metrics_api),
    )


async def _time(app: Any, scope: dict[str, Any], count: int) -> tuple[float, int, int]:
    """CPU seconds for `count` requests; the status and body size of the last one."""
    status = 0
    size = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            size = len(message.get("body", b""))

    started = time.process_time()
    for _ in range(count):
        await app(dict(scope, headers=list(scope["headers"])), receive, send)
    return time.process_time() - started, status, size


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    app = _build_app(args.pods)
    pod = app.engine.cluster.list_objects(_pods(), "default", _selector("app=web"))[0][1]
    single = _scope(SINGLE.replace(b"{pod}", pod.encode()))
    many = _scope(LIST, b"labelSelector=app%3Dweb")
    results: dict[str, Any] = {}
    for name, scope, count, unit in (
        ("single_us", single, args.single, 1e6),
        ("list_ms", many, args.lists, 1e3),
    ):
        await _time(app, scope, max(1, count // 10))  # warm caches
        best = float("inf")
        for _ in range(args.repeat):
            seconds, status, size = await _time(app, scope, count)
            assert status == 200, status
            results[name.split("_")[0] + "_bytes"] = size
            best = min(best, seconds / count * unit)
        results[name] = round(best, 2)
    return results


def _pods() -> Any:
    from custom_metrics_server.domain import GroupResource

    return GroupResource("", "pods")


def _selector(text: str) -> Any:
    """`parse_selector` of whichever layout the tree under test has."""
    module = _module("machinery.label_parser", "machinery.selectors")
    if not hasattr(module, "parse_selector"):  # pragma: no cover - defensive
        raise ImportError("parse_selector")
    return module.parse_selector(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, help="a tree to measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--single", type=int, default=20_000, help="requests per batch")
    parser.add_argument("--lists", type=int, default=200, help="list requests per batch")
    parser.add_argument("--repeat", type=int, default=7, help="batches; the best is kept")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny batches: the harness works")
    args = parser.parse_args()
    if args.smoke:
        args.single, args.lists, args.repeat, args.rounds = 200, 5, 2, 1
    if args.worker:
        print(json.dumps(asyncio.run(_worker(args))))
        return 0
    trees = [tree.resolve() for tree in (args.tree or [ROOT])]
    figures: dict[Path, list[dict[str, Any]]] = {tree: [] for tree in trees}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for number in range(args.rounds):
        for tree in trees:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                *("--pods", str(args.pods), "--single", str(args.single)),
                *("--lists", str(args.lists), "--repeat", str(args.repeat)),
            ]
            env = {**os.environ, "PYTHONPATH": str(tree)}
            output = subprocess.run(
                command, capture_output=True, text=True, check=True, env=env, cwd=tree
            ).stdout
            result = json.loads(output.strip().splitlines()[-1])
            figures[tree].append(result)
            print(f"round {number + 1} {tree}: {result}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| tree | single µs (best, median) | 1,000-item list ms (best, median) |")
    print("|---|---|---|")
    for tree, runs in figures.items():
        single = [run["single_us"] for run in runs]
        lists = [run["list_ms"] for run in runs]
        print(
            f"| {tree} | {min(single):.1f}, {statistics.median(single):.1f} "
            f"| {min(lists):.2f}, {statistics.median(lists):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
