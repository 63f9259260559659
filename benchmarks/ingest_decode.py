"""Initial-list ingest in process, per pod: decoding list pages and building the records, old
and new code alternated (issue 17, item 1).

The envelope's pods (`tests/fakes/envelope_world.py`, ~2.8 KB of JSON each) in list pages of
500, as the fake API server sends them, fed the way the Kubernetes backend's reflector feeds
them: the page's bytes decoded (the old code: `orjson.loads`, every field a Python object; the
new: the schema decoder of `cluster_state/wire_objects.py`, only the fields the records read), then
every object handed to `ClusterState`'s pod sink (records, label index, owner and node
indexes, the resource-shape memo) in a fresh state. Also one MODIFIED watch event (a line
decoded, then the sink). Each variant runs in a child process of its own (`--worker`), the
code on its `PYTHONPATH`, the server's GC tuning applied; the variants alternate `--rounds`
times and each child reports the best of `--repeat` (CPU, `time.process_time`) per pod.

    python benchmarks/ingest_decode.py --old /tmp/base-ingest        # 20,000 pods, 3 rounds
    python benchmarks/ingest_decode.py --old /tmp/base-ingest --pods 50000 --rounds 4
    python benchmarks/ingest_decode.py --smoke                       # this tree's two paths (~10 s)

`--old DIR` is a tree holding an older `custom_metrics_server` (for example
`git archive 3ab3731 custom_metrics_server | tar -x -C DIR`); without it the two variants are
this tree's dict path (the generic decode the other reflectors use) and its schema path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = 500


def _worker(pods: int, repeat: int, path: str) -> dict[str, Any]:
    import orjson

    from custom_metrics_server.cluster_state.records import PODS, ClusterState
    from custom_metrics_server.runtime.heap import tune_gc
    from tests.fakes.envelope_world import make_pod, plan_world, scale_shape

    tune_gc()
    codec: Any = None
    if path == "schema":
        from custom_metrics_server.cluster_state.wire_objects import PodWire, WireCodec

        codec = WireCodec(PodWire)
    plan = plan_world(scale_shape(pods))
    objects = [make_pod(plan, i) for i in range(pods)]
    for index, obj in enumerate(objects):
        obj["metadata"]["resourceVersion"] = str(100 + index)
    pages = [
        orjson.dumps(
            {
                "kind": "PodList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "99", "continue": "c"},
                "items": objects[start : start + PAGE],
            }
        )
        for start in range(0, pods, PAGE)
    ]
    modified = [
        orjson.dumps({"type": "MODIFIED", "object": obj}) for obj in objects[: min(pods, 5000)]
    ]
    del objects

    def decode(body: bytes) -> list[Any]:
        if codec is None:
            items: list[Any] = orjson.loads(body)["items"]
            return items
        return list(codec.page(body).items)

    def event(line: bytes) -> tuple[str, Any]:
        if codec is None:
            found = orjson.loads(line)
            return found["type"], found["object"]
        decoded = codec.event(line)
        return decoded.type, decoded.object

    best = {"decode": float("inf"), "ingest": float("inf"), "event": float("inf")}
    for _ in range(repeat):
        started = time.process_time()
        for body in pages:
            decode(body)
        best["decode"] = min(best["decode"], time.process_time() - started)
        state = ClusterState()
        sink = state.sink(PODS)
        started = time.process_time()
        sink.list_started()
        for body in pages:
            for item in decode(body):
                sink.listed(item)
        sink.list_finished()
        best["ingest"] = min(best["ingest"], time.process_time() - started)
        started = time.process_time()
        for line in modified:
            sink.event(*event(line))
        best["event"] = min(best["event"], time.process_time() - started)
        assert len(state.pods) == pods
    return {
        "decode_us": best["decode"] / pods * 1e6,
        "ingest_us": best["ingest"] / pods * 1e6,
        "event_us": best["event"] / len(modified) * 1e6,
        "records_us": (best["ingest"] - best["decode"]) / pods * 1e6,
    }


def _run(tree: Path, args: argparse.Namespace, path: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    command = [sys.executable, __file__, "--worker", "--pods", str(args.pods)]
    command += ["--repeat", str(args.repeat), "--path", path]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True, cwd=tree)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3, help="best of, within one child")
    parser.add_argument("--rounds", type=int, default=3, help="old/new alternations")
    parser.add_argument("--old", type=Path, help="a tree with an older custom_metrics_server")
    parser.add_argument("--smoke", action="store_true", help="2,000 pods, one round")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", default="schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.pods, args.repeat, args.path)))
        return
    if args.smoke:
        args.pods, args.repeat, args.rounds = 2000, 1, 1
    variants = [
        ("old", args.old, "dict") if args.old else ("dict path", ROOT, "dict"),
        ("new", ROOT, "schema"),
    ]
    print(f"{args.pods:,} pods; load {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in variants}
    for _ in range(args.rounds):
        for name, tree, path in variants:
            results[name].append(_run(tree, args, path))
            row = results[name][-1]
            print(f"  {name:9} " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()), flush=True)
    print(f"load {os.getloadavg()[0]:.2f}")
    print(
        "\n| variant | decode µs/pod | records µs/pod | decode + records µs/pod | MODIFIED event µs |"
    )
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        best = {key: min(row[key] for row in rows) for key in rows[0]}
        print(
            f"| {name} | {best['decode_us']:.2f} | {best['records_us']:.2f} | "
            f"{best['ingest_us']:.2f} | {best['event_us']:.2f} |"
        )
    if args.smoke:
        new = min(row["ingest_us"] for row in results["new"])
        old = min(row["ingest_us"] for row in results[variants[0][0]])
        assert new < old, f"the schema path is not cheaper ({new:.1f} >= {old:.1f} µs a pod)"


if __name__ == "__main__":
    main()
