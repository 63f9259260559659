"""A fake cluster in its own process: the fake kube-apiserver holding a generated world.

Tests and benchmarks that need a cluster at scale run it as a child process, so the API
server's work (list pages, watch streams, node-proxy answers) has its own core and GIL, as a
real kube-apiserver would, and the server under test is measured alone::

    python -m tests.fakes.cluster_process --nodes 3000 --pods-per-node 2 \
        --hanging-nodes 50 --hang-seconds 30 --kubeconfig /tmp/kc

It prints ``ready <url>`` on stdout once the world is loaded and the kubeconfig written, then
serves until stdin closes or it receives SIGTERM. With ``--auth-kubeconfig PATH`` it also runs
the TokenReview/SubjectAccessReview fake (`tests.fakes.auth_webhooks`, everything allowed, the
bearer token ``TOKEN`` authenticating as ``tester``) and writes its kubeconfig there, for a
`serve` with delegated authentication (`serve_flags`).

The world: ``--nodes`` nodes (``node-00000``, ...) and ``--pods-per-node`` running pods on each,
spread over ``--namespaces`` namespaces (``ns-0000``, ...; pod ``p-<node>-<i>``, label
``app=app-<namespace index>``), each pod with one container requesting 100m CPU and 64Mi.
Node-proxy answers (``/api/v1/nodes/{node}/proxy/metrics/resource``), in node order: the first
``--healthy-nodes`` answer a kubelet exposition of their pods at once; the next
``--hanging-nodes`` answer it only after ``--hang-seconds`` (a kubelet that hangs until the
scraper's deadline); every other node has no kubelet, so the proxy fails fast with 503 as
kube-apiserver does for an unreachable kubelet.
"""

from __future__ import annotations

import argparse
import base64
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.auth_webhooks import FakeAuthApiServer
from tests.fakes.kube_apiserver import FakeKubeApiServer

#: The bearer token the auth fake accepts (user `tester`, group `system:authenticated`).
TOKEN = "cluster-process-tester"


def serve_flags(kubeconfig: Path, auth_kubeconfig: Path) -> list[str]:
    """`serve` flags for this fake cluster with delegated authentication and authorization."""
    return [
        "--kubeconfig",
        str(kubeconfig),
        "--authentication-kubeconfig",
        str(auth_kubeconfig),
        "--authorization-kubeconfig",
        str(auth_kubeconfig),
        "--authentication-skip-lookup",
    ]


def node_name(index: int) -> str:
    return f"node-{index:05d}"


def namespace_name(index: int) -> str:
    return f"ns-{index:04d}"


def pod_name(node: int, index: int) -> str:
    return f"p-{node:05d}-{index}"


def pods(nodes: int, per_node: int, namespaces: int) -> Iterator[dict[str, Any]]:
    """Running pods, `per_node` on each node, namespaces assigned round robin."""
    for n in range(nodes):
        for i in range(per_node):
            ns = (n * per_node + i) % namespaces
            yield {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {
                    "name": pod_name(n, i),
                    "namespace": namespace_name(ns),
                    "labels": {"app": f"app-{ns}"},
                },
                "spec": {
                    "nodeName": node_name(n),
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.9",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }


def kubelet_text(node: int, per_node: int, namespaces: int) -> bytes:
    """The kubelet's `/metrics/resource` for one node's pods (static counters)."""
    stamp = 1_700_000_000_000
    lines = [
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the "
        "container in core-seconds",
        "# TYPE container_cpu_usage_seconds_total counter",
    ]
    memory = ["# TYPE container_memory_working_set_bytes gauge"]
    for i in range(per_node):
        ns = namespace_name((node * per_node + i) % namespaces)
        labels = f'container="main",namespace="{ns}",pod="{pod_name(node, i)}"'
        lines.append(f"container_cpu_usage_seconds_total{{{labels}}} 12.5 {stamp}")
        memory.append(f"container_memory_working_set_bytes{{{labels}}} 4.194304e+07 {stamp}")
    lines += memory
    lines += [
        "# TYPE node_cpu_usage_seconds_total counter",
        f"node_cpu_usage_seconds_total 1234.5 {stamp}",
        "# TYPE node_memory_working_set_bytes gauge",
        f"node_memory_working_set_bytes 2.147483648e+09 {stamp}",
        "# TYPE resource_scrape_error gauge",
        "resource_scrape_error 0",
    ]
    return ("\n".join(lines) + "\n").encode()


def write_kubeconfig(path: Path, url: str) -> None:
    """A kubeconfig naming the fake (plain HTTP) with a dummy bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "fake", "user": {"token": base64.b64encode(b"fake").decode()}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))


def load_world(api: FakeKubeApiServer, args: argparse.Namespace) -> None:
    """Namespaces, nodes, pods and the node-proxy answers described in the module docstring."""
    api.apply_many(
        "namespaces",
        (
            {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": namespace_name(i)}}
            for i in range(args.namespaces)
        ),
        copies=False,
    )
    api.apply_many(
        "nodes",
        (
            {
                "kind": "Node",
                "apiVersion": "v1",
                "metadata": {"name": node_name(i), "labels": {}},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
            }
            for i in range(args.nodes)
        ),
        copies=False,
    )
    api.apply_many("pods", pods(args.nodes, args.pods_per_node, args.namespaces), copies=False)
    for index in range(min(args.nodes, args.healthy_nodes + args.hanging_nodes)):
        hanging = index >= args.healthy_nodes
        api.set_node_proxy(
            node_name(index),
            kubelet_text(index, args.pods_per_node, args.namespaces),
            delay=args.hang_seconds if hanging else 0.0,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods-per-node", type=int, default=2)
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--healthy-nodes", type=int, default=0)
    parser.add_argument("--hanging-nodes", type=int, default=0)
    parser.add_argument("--hang-seconds", type=float, default=30.0)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--auth-kubeconfig", type=Path)
    args = parser.parse_args(argv)
    api = FakeKubeApiServer()
    load_world(api, args)
    api.start()
    write_kubeconfig(args.kubeconfig, api.url)
    auth: FakeAuthApiServer | None = None
    if args.auth_kubeconfig is not None:
        auth = FakeAuthApiServer()
        auth.tokens[TOKEN] = {"username": "tester", "groups": ["system:authenticated"]}
        auth.allow_all = True
        auth.up()
        auth.write_kubeconfig(args.auth_kubeconfig)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print(f"ready {api.url}", flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    if auth is not None:
        auth.down()
    api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
