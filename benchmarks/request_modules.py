"""Which of the package's modules one request passes: the demo app in process (what
`serve --demo --demo-pods 1000 --demo-web-pods 1000` builds, as `in_process.py` builds it), one
warm-up request, then one request under `sys.setprofile`, listing every distinct module of
`custom_metrics_server` whose Python functions ran (C functions count for the module that
called them; the background tasks of the demo do not run, since nothing awaits between the
request's own steps). Packages are the module's first name under the package (`server`,
`query`, ...; a top-level module such as `domain` is its own).

    python benchmarks/request_modules.py                   # the Pods request, one pod
    python benchmarks/request_modules.py --request list    # pods/* with app=web
    python benchmarks/request_modules.py --request resource  # metrics.k8s.io, one pod
    python benchmarks/request_modules.py --json            # machine-readable

Cheap (one request, about 2 s of start-up) and deterministic: the same tree gives the same
list on any machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from in_process import LIST, SINGLE, _build_app, _pods, _scope, _selector  # noqa: E402

PACKAGE = "custom_metrics_server"
RESOURCE = b"/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/{pod}"


async def _run(app: Any, scope: dict[str, Any]) -> int:
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(dict(scope, headers=list(scope["headers"])), receive, send)
    return status


def modules_of(app: Any, scope: dict[str, Any]) -> tuple[int, list[str], int]:
    """The status of one request, the sorted package modules whose functions it ran, and how
    many Python function calls of the package it made (a deterministic cost figure)."""
    seen: set[str] = set()
    calls = 0

    def profile(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith(PACKAGE + "."):
                seen.add(name[len(PACKAGE) + 1 :])
                calls += 1

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_run(app, scope))  # warm-up: memos, render caches
        sys.setprofile(profile)
        try:
            status = loop.run_until_complete(_run(app, scope))
        finally:
            sys.setprofile(None)
    finally:
        loop.close()
    return status, sorted(seen), calls


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request", choices=("single", "list", "resource"), default="single")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    app = _build_app(args.pods)
    pod = app.engine.cluster.list_objects(_pods(), "default", _selector("app=web"))[0][1]
    if args.request == "single":
        scope = _scope(SINGLE.replace(b"{pod}", pod.encode()))
    elif args.request == "list":
        scope = _scope(LIST, b"labelSelector=app%3Dweb")
    else:
        scope = _scope(RESOURCE.replace(b"{pod}", pod.encode()))
    status, modules, calls = modules_of(app, scope)
    packages = sorted({package_of(module) for module in modules})
    if args.json:
        print(
            json.dumps({"status": status, "modules": modules, "packages": packages, "calls": calls})
        )
        return 0
    print(
        f"status {status}: {len(modules)} modules in {len(packages)} packages, "
        f"{calls} Python calls of the package"
    )
    for package in packages:
        members = [m for m in modules if package_of(m) == package]
        print(f"  {package:14} {', '.join(m.split('.', 1)[-1] for m in members)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
