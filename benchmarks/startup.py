"""Start-up of `serve --demo`: wall time from process start to `/readyz` 200, idle RSS 2 s
later, and whether the `kubernetes` package was imported (the demo should not need it).

Each `--tree` is measured in interleaved rounds (its package first on `sys.path`), so that two
trees (before and after a change) are compared in one run:

    python benchmarks/startup.py                                    # this tree
    python benchmarks/startup.py --tree /tmp/before --tree . --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def measure(tree: Path) -> tuple[float, float, bool]:
    """(seconds to ready, idle RSS MiB, kubernetes imported) of one start in `tree`."""
    with tempfile.TemporaryDirectory() as workdir:
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
        # -X importtime lists every import on stderr: how we tell whether kubernetes came in.
        command = [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "custom_metrics_server",
            "serve",
            "--demo",
            "--secure-port",
            "0",
            "--cert-dir",
            f"{workdir}/certs",
        ]
        started = time.perf_counter()
        log = Path(workdir) / "stderr"
        with open(log, "w") as sink:
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=sink, text=True, env=env, cwd=tree
            )
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split(" on ", 1)[1].split()[0]
            ca = f"{workdir}/certs/apiserver.crt"
            with httpx.Client(base_url=url, verify=ca, timeout=5) as client:
                while client.get("/readyz").status_code != 200:
                    time.sleep(0.01)
            ready = time.perf_counter() - started
            time.sleep(2)
            pages = int(Path(f"/proc/{process.pid}/statm").read_text().split()[1])
        finally:
            process.terminate()
            process.wait(timeout=15)
            if process.stdout is not None:
                process.stdout.close()
        kubernetes = any(
            line.rsplit("|", 1)[-1].strip() == "kubernetes"
            for line in log.read_text().splitlines()
            if line.startswith("import time:")
        )
        return ready, pages * PAGE / 2**20, kubernetes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", type=Path, help="a tree to measure")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one round: the harness works")
    args = parser.parse_args()
    rounds = 1 if args.smoke else args.rounds
    trees = [tree.resolve() for tree in (args.tree or [ROOT])]
    results: dict[Path, list[tuple[float, float, bool]]] = {tree: [] for tree in trees}
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    for _ in range(rounds):
        for tree in trees:
            results[tree].append(measure(tree))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("\n| tree | to ready s (best, median) | idle RSS MiB (median) | imports kubernetes |")
    print("|---|---|---|---|")
    for tree, runs in results.items():
        ready = [run[0] for run in runs]
        rss = [run[1] for run in runs]
        print(
            f"| {tree} | {min(ready):.2f}, {statistics.median(ready):.2f} "
            f"| {statistics.median(rss):.1f} | {any(run[2] for run in runs)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
