"""What `pods` MetricDefinitions cost kube-apiserver in watches and connections, through a real
kube-apiserver: N definitions in M namespaces, the real server process watching them.

    python benchmarks/definition_watches.py                     # 1,000 in 100 namespaces
    python benchmarks/definition_watches.py --smoke             # 40 in 4 (about a minute)
    python benchmarks/definition_watches.py --package-dir DIR   # the server's code from DIR

The control-plane tier's etcd + kube-apiserver (tests/controlplane/cluster.py) with the CRD of
manifests/crds and one Running pod per namespace (its status set as a kubelet would; it serves
nothing: the figures are the watches', not the scrapes'). The server runs the
`metric-definitions` backend alone (`writeStatus: false`); its RSS with no definition is the
baseline. Then N `pods` definitions are created, each with a selector of its own (so no two
could share a server-side `labelSelector`), and once the server has logged every one serving
and the API server's count of watches has been steady for 6 s:

* **watches of pods** at kube-apiserver: its `apiserver_longrunning_requests` gauge, verb
  WATCH, resource pods, summed;
* **connections**: the server process's established TCP connections to the API server's port
  (`/proc/<pid>/net/tcp*` matched with the process's socket inodes);
* **RSS** of the server and of kube-apiserver (`/proc/<pid>/status`), the server's CPU over
  `--steady` seconds after that, and how often its log says a call found no free connection.

`--package-dir` puts a checkout's `custom_metrics_server` first on the server's PYTHONPATH, so
the same benchmark measures the code before a change (`git archive <commit>
custom_metrics_server | tar -x -C DIR`). Prints a JSON summary; exits non-zero when the
server never logs every definition serving.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import yaml  # noqa: E402

from benchmarks.definitions_scale import post_all, proc  # noqa: E402
from custom_metrics_server.testing.server_process import (  # noqa: E402
    ServerProcess,
    start_server,
    stop_server,
)
from tests.controlplane.cluster import ControlPlane  # noqa: E402
from tests.controlplane.test_metric_definitions import (  # noqa: E402
    CRD_DIR,
    CRD_NAME,
    GROUP,
    VERSION,
)
from tests.controlplane.test_metric_definitions_serving import (  # noqa: E402
    running_pod,
    set_running,
)


def namespace_name(index: int) -> str:
    return f"watch-{index:04d}"


def definition(index: int, namespaces: int) -> tuple[str, dict[str, Any]]:
    namespace = namespace_name(index % namespaces)
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions"
    return path, {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MetricDefinition",
        "metadata": {"name": f"pods-{index}", "namespace": namespace},
        "spec": {
            "metricName": f"inflight_{index // namespaces}",
            "servedAs": {"type": "External"},
            "source": {
                "type": "Pods",
                "pods": {
                    "selector": {"matchLabels": {"app": "web", "slot": str(index)}},
                    "port": "metrics",
                    "metric": "inflight",
                },
            },
        },
    }


def pod_watches(plane: ControlPlane) -> int:
    """kube-apiserver's open WATCH requests on pods (every scope), from its /metrics."""
    verify = plane.ssl_context(plane.pki.admin)
    text = httpx.get(f"{plane.url}/metrics", verify=verify, timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_longrunning_requests{")
            and 'verb="WATCH"' in line
            and 'resource="pods"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def connections_to(pid: int, port: int) -> int:
    """Established TCP connections of process `pid` to remote `port`."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for row in path.read_text().splitlines()[1:]:
            fields = row.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                count += 1
    return count


def start(workdir: Path, plane: ControlPlane, package_dir: str | None) -> ServerProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    backends = workdir / "backends.yaml"
    settings = {"kubeconfig": str(plane.admin_kubeconfig), "writeStatus": False}
    entry = {"name": "metric-definitions", "type": "metric-definitions", "settings": settings}
    backends.write_text(yaml.safe_dump({"backends": [entry]}))
    env = {"PYTHONPATH": package_dir} if package_dir else None
    return start_server(workdir, "--backends-config", str(backends), timeout=120, env=env)


def wait_serving(server: ServerProcess, total: int, limit: float) -> float:
    began = time.perf_counter()
    count = 0
    while time.perf_counter() - began < limit:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited\n{server.logs()[-4000:]}")
        logs = server.logs()
        count = sum(logs.count(f"/pods-{i} serves ") for i in range(total))
        if count >= total:
            return time.perf_counter() - began
        time.sleep(1)
    raise RuntimeError(f"{count} of {total} definitions serving after {limit:g} s")


def wait_steady(plane: ControlPlane, limit: float) -> int:
    """The pod watch count once unchanged over three polls 2 s apart (or at `limit`)."""
    began, seen = time.perf_counter(), [-1]
    while time.perf_counter() - began < limit:
        seen.append(pod_watches(plane))
        if len(seen) >= 4 and len(set(seen[-4:])) == 1:
            break
        time.sleep(2)
    return seen[-1]


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    total, spaces = args.definitions, args.namespaces
    result: dict[str, Any] = {
        "definitions": total,
        "namespaces": spaces,
        "code": args.package_dir or "this checkout",
        "machine": f"{os.cpu_count()} CPU {platform.machine()}, Python {platform.python_version()}",
        "load_average_start": os.getloadavg(),
    }
    plane = ControlPlane.start(base / "plane")
    try:
        plane.kubectl("apply", "--server-side", "--field-manager=bench", "-k", str(CRD_DIR))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
        names = [namespace_name(i) for i in range(spaces)]
        asyncio.run(
            post_all(plane, [("/api/v1/namespaces", {"metadata": {"name": n}}) for n in names], 16)
        )
        # What a pod needs in its namespace (tests/controlplane/cluster.py, create_namespace).
        needs: list[tuple[str, dict[str, Any]]] = []
        for n in names:
            needs.append(
                (f"/api/v1/namespaces/{n}/serviceaccounts", {"metadata": {"name": "default"}})
            )
            config = {
                "metadata": {"name": "openshift-service-ca.crt"},
                "data": {"service-ca.crt": ""},
            }
            needs.append((f"/api/v1/namespaces/{n}/configmaps", config))
        asyncio.run(post_all(plane, needs, 16))
        pods = [running_pod(n, "web-0", {"app": "web"}, 9) for n in names]
        plane.apply(pods)
        for pod in pods:
            set_running(plane, pod)
        apiserver = plane.processes["kube-apiserver"].process
        assert apiserver is not None
        server = start(base / "server", plane, args.package_dir)
        try:
            time.sleep(3)
            _, rss_empty = proc(server.pid)
            _, api_rss_empty = proc(apiserver.pid)
            watches_empty = pod_watches(plane)
            result["server_rss_empty_mib"] = round(rss_empty, 1)
            result["apiserver_rss_empty_mib"] = round(api_rss_empty, 1)
            posts = [definition(index, spaces) for index in range(total)]
            asyncio.run(post_all(plane, posts, 32))
            result["serving_s"] = round(wait_serving(server, total, 60 + total * 0.2), 1)
            watches = wait_steady(plane, 120)
            cpu0, rss = proc(server.pid)
            _, api_rss = proc(apiserver.pid)
            result["pod_watches_at_apiserver"] = watches - watches_empty
            result["server_connections_to_apiserver"] = connections_to(
                server.pid, plane.apiserver_port
            )
            result["server_rss_mib"] = round(rss, 1)
            result["server_rss_per_definition_kb"] = round((rss - rss_empty) * 1024 / total, 1)
            result["apiserver_rss_mib"] = round(api_rss, 1)
            time.sleep(args.steady)
            cpu1, _ = proc(server.pid)
            result["server_cpu_percent_steady"] = round((cpu1 - cpu0) / args.steady * 100, 1)
            result["no_free_connection_lines"] = server.logs().count("no free connection")
        finally:
            stop_server(server)
    finally:
        plane.stop()
    result["load_average_end"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--definitions", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--steady", type=float, default=30.0, help="seconds of CPU observed")
    parser.add_argument("--package-dir", help="the server's custom_metrics_server from here")
    parser.add_argument("--smoke", action="store_true", help="40 in 4 namespaces")
    args = parser.parse_args()
    if args.smoke:
        args.definitions, args.namespaces, args.steady = 40, 4, 5.0
    with tempfile.TemporaryDirectory(prefix="definition-watches-") as tmp:
        try:
            result = run(args, Path(tmp))
        except Exception as err:
            print(f"FAILED: {err}", file=sys.stderr)
            return 1
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
