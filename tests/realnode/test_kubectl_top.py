"""`kubectl top` through the real API server, answered by our server as the registered
`metrics.k8s.io` (tests/realnode/hostserver.py: a host process behind a selector-less Service
and an EndpointSlice, the aggregator verifying it with the APIService's caBundle).

kubectl prints CPU as `MilliValue()` (rounded up) with an `m`, memory as whole MiB (bytes //
2^20). Each table must show what our server answers for the same objects at that moment:
the test reads the raw PodMetrics/NodeMetrics through the aggregator before and after
kubectl and accepts either (a scrape may land between them), so a number kubectl got from
anywhere else fails.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from custom_metrics_server.machinery.quantity import Quantity
from tests.realnode.conftest import MetricsServer
from tests.realnode.node import (
    NS_PREFIX,
    SPIN,
    RealNode,
    busybox_container,
    deployment,
    namespace,
    wait_for,
    wait_ready,
)
from tests.tools import find

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

NS = f"{NS_PREFIX}top"


@pytest.fixture(scope="module")
def workload(realnode: RealNode) -> Iterator[str]:
    """One pod of two containers: a CPU loop capped at 100m and a 16 MiB memory holder."""
    with namespace(realnode, NS) as ns:
        realnode.apply(
            deployment(
                ns,
                "top",
                [
                    busybox_container(
                        "spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "100m"}
                    ),
                    busybox_container(
                        "hold",
                        ["memhog", "16"],
                        requests={"memory": "24Mi"},
                        limits={"memory": "48Mi"},
                    ),
                ],
            )
        )
        wait_ready(realnode, ns, "app=top", 1)
        yield ns


def kubectls(realnode: RealNode) -> list[str]:
    """The realnode's kubectl (1.36: reads v1beta1) and, when `make tools` put it there,
    kubectl 1.37 (reads v1, the preferred version)."""
    found = [str(realnode.k8s_bin / "kubectl")]
    newer = find("kubectl", prefer_tools_dir=True)
    if newer and ".tools" in newer:
        found.append(newer)
    return found


def run(realnode: RealNode, kubectl: str, *args: str) -> str:
    result = subprocess.run(  # the realnode's or the pinned kubectl
        [kubectl, "--kubeconfig", str(realnode.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"{kubectl} {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def table(text: str) -> list[list[str]]:
    rows = [line.split() for line in text.strip().splitlines()]
    return rows[1:]


def milli(quantity: str) -> str:
    return f"{Quantity.parse(quantity).milli_value()}m"


def mebi(quantity: str) -> str:
    return f"{int(Quantity.parse(quantity).value) // 2**20}Mi"


def pod_rows(answer: dict[str, Any]) -> set[tuple[str, ...]]:
    return {
        (
            answer["metadata"]["name"],
            c["name"],
            milli(c["usage"]["cpu"]),
            mebi(c["usage"]["memory"]),
        )
        for c in answer["containers"]
    }


def node_cells(answer: dict[str, Any]) -> tuple[str, str]:
    return milli(answer["usage"]["cpu"]), mebi(answer["usage"]["memory"])


def test_kubectl_top_pods_containers_shows_our_answers(
    realnode: RealNode, metrics_server: MetricsServer, workload: str
) -> None:
    [pod] = realnode.get("pods", "-n", workload, "-l", "app=top")["items"]
    name = pod["metadata"]["name"]
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{workload}/pods/{name}"
    wait_for(f"usage of {name} from our server", lambda: realnode.raw(path), timeout=120)
    for kubectl in kubectls(realnode):

        def shown(
            kubectl: str = kubectl,
        ) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]] | None:
            before = pod_rows(json.loads(realnode.raw(path)))
            rows = {
                tuple(r)
                for r in table(
                    run(realnode, kubectl, "top", "pods", "-n", workload, "--containers")
                )
            }
            after = pod_rows(json.loads(realnode.raw(path)))
            return (rows, before) if rows in (before, after) else None

        rows, _ = wait_for(f"{kubectl} top pods to show our answer", shown, timeout=60)
        assert {row[1] for row in rows} == {"spin", "hold"}
        # A 16 MiB holder and a capped loop: the numbers are the workload's, not zeros.
        hold = next(row for row in rows if row[1] == "hold")
        assert int(hold[3].removesuffix("Mi")) >= 16, rows
        spin = next(row for row in rows if row[1] == "spin")
        assert int(spin[2].removesuffix("m")) > 0, rows


def test_kubectl_top_nodes_shows_our_answer(
    realnode: RealNode, metrics_server: MetricsServer
) -> None:
    path = f"/apis/metrics.k8s.io/v1beta1/nodes/{realnode.node}"
    wait_for("the node's usage from our server", lambda: realnode.raw(path), timeout=120)
    for kubectl in kubectls(realnode):

        def shown(kubectl: str = kubectl) -> list[str] | None:
            before = node_cells(json.loads(realnode.raw(path)))
            [row] = table(run(realnode, kubectl, "top", "nodes"))
            after = node_cells(json.loads(realnode.raw(path)))
            return row if (row[1], row[3]) in (before, after) else None

        row = wait_for(f"{kubectl} top nodes to show our answer", shown, timeout=60)
        assert row[0] == realnode.node
        # CPU% and MEMORY% against the node's allocatable, which the API server serves.
        assert row[2].endswith("%"), row
        assert row[4].endswith("%"), row
