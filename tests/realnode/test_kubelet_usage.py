"""Our server scraping the real kubelet, through the API server's node proxy and directly
(the kubelet's serving certificate verified with the cluster CA, no insecure flag; the node's
InternalIP is what direct scraping dials), and its answers against the kubelet's own
`/metrics/resource` and `/stats/summary` (recorded by tests/realnode/kubelet_record.py while
the server scrapes).

The bound, and why. CPU is a rate: the server answers `(c(s2) - c(s1)) / w` for a counter
`c` read by the kubelet at the two sample times `s1 < s2` of its last two scrapes, with
`w = s2 - s1` stated in the answer (`window`, in milliseconds) and `s2` stated to the second
(`timestamp`, truncated). Container samples are read live from the CRI at each request, so the
test never sees the server's own samples; but the counter never decreases, so any sample the
test took before `s1`/`s2` bounds it from below and any taken after bounds it from above.
`s2` is pinned by the answer's second and by when the server's scrape counter moved (the
recorder polls it), `s1` is `s2 - w`, and the rate must lie in

    [ (c(before s2) - c(after s1)) / w , (c(after s2) - c(before s1)) / w ]

(each container of a pod has its own sample times, a few milliseconds apart: the brackets
and the window are widened by 10 ms for that), less one nanocore for the server's truncation
to whole nanocores. With a sample every ~0.1-0.2 s and a 10 s window the interval is a few
percent of a busy container's rate wide: a wrong window, unit, pairing of samples or pod
falls out of it. Memory is a gauge: on the same sample it would be exact; the test cannot
read the server's sample, so the working set must be one the kubelet reported within half a
second of `s2` (the workload holds steady memory, so that range is usually one value).

Node usage comes from cAdvisor's housekeeping: every client gets the same sample, with the
same timestamp, until the next one. There the comparison is exact: the server's `NodeMetrics`
must be metrics-server's arithmetic on the two node samples whose timestamps match its
`timestamp` and `window` (whole nanoseconds of the counters, truncated to nanocores; the
working set to the byte), and `/stats/summary` must show the same counter and working set for
those samples.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.machinery.quantity import Quantity
from tests.realnode.hostserver import HostServer, start_host_server, stop
from tests.realnode.kubelet_record import Point, Recorder, counter_bounds, gauge_range
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

# The waits inside are bounded (generous deadlines for a busy machine): above the default
# per-test timeout of 120 s, so it is raised for this tier.
pytestmark = [pytest.mark.realnode, pytest.mark.timeout(900)]

NS = f"{NS_PREFIX}usage"
RESOLUTION = 10.0
#: Spread of one kubelet answer's container timestamps, and the window's per container.
SPREAD = 0.010
#: How far from s2 a working set the kubelet reported may be.
MEMORY_MARGIN = 0.5


@pytest.fixture(scope="module")
def workload(realnode: RealNode) -> Iterator[str]:
    """Two single-container CPU loops (capped at 150m) and a pod of a loop (50m) and a 16 MiB
    holder."""
    with namespace(realnode, NS) as ns:
        realnode.apply(
            deployment(
                ns,
                "spin",
                [busybox_container("spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "150m"})],
                replicas=2,
            ),
            deployment(
                ns,
                "pair",
                [
                    busybox_container("spin", SPIN, requests={"cpu": "10m"}, limits={"cpu": "50m"}),
                    busybox_container(
                        "hold",
                        ["memhog", "16"],
                        requests={"memory": "24Mi"},
                        limits={"memory": "48Mi"},
                    ),
                ],
            ),
        )
        wait_ready(realnode, ns, "app=spin", 2)
        wait_ready(realnode, ns, "app=pair", 1)
        yield ns


def server_flags(realnode: RealNode, source: str, ca: Path) -> list[str]:
    flags = [
        "--kubeconfig",
        str(realnode.kubeconfig),
        "--enable-metrics-api",
        "--metric-resolution",
        f"{RESOLUTION:.0f}s",
        "--kubelet-source",
        source,
    ]
    if source == "direct":
        flags += ["--kubelet-certificate-authority", str(ca)]
    return flags


@pytest.fixture(params=["proxy", "direct"])
def scraping(
    request: pytest.FixtureRequest, realnode: RealNode, workload: str, tmp_path: Path
) -> Iterator[tuple[HostServer, Recorder]]:
    """A server scraping the kubelet (`proxy` or `direct`) and the recorder beside it."""
    server = start_host_server(
        realnode, tmp_path, *server_flags(realnode, request.param, realnode.ca)
    )
    recorder = Recorder(realnode, server)
    recorder.start()
    try:
        yield server, recorder
    finally:
        recorder.stop()
        stop(server)


def seconds(window: str) -> float:
    """A metrics.k8s.io window (`10.004s`, `1m0.5s`: Go durations the server writes)."""
    minutes, _, rest = window.rpartition("m")
    return (float(minutes) * 60 if minutes else 0.0) + float(rest.removesuffix("s"))


def epoch(stamp: str) -> int:
    return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


def snapshot(server: HostServer, ns: str, node: str) -> dict[str, Any] | None:
    """The server's answers for the namespace's pods and the node, all from one scrape (None
    when a scrape landed between the requests, or usage is not there yet)."""
    with server.client() as client:
        pods = client.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods").json()
        custom = {}
        for resource in ("cpu", "memory"):
            custom[resource] = client.get(
                f"/apis/custom.metrics.k8s.io/v1beta2/namespaces/{ns}/pods/*/kube_running_pod_resource_usage",
                params={"metricLabelSelector": f"resource={resource}"},
            ).json()
        node_answer = client.get(f"/apis/metrics.k8s.io/v1beta1/nodes/{node}").json()
        again = client.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods").json()
    if len(pods.get("items", ())) != 3 or node_answer.get("kind") != "NodeMetrics":
        return None
    stamps = {p["timestamp"] for p in pods["items"]} | {p["timestamp"] for p in again["items"]}
    stamps |= {i["timestamp"] for r in custom.values() for i in r.get("items", ())}
    if len(stamps) != 1 or any(len(r.get("items", ())) != 3 for r in custom.values()):
        return None
    return {"pods": pods, "custom": custom, "node": node_answer, "second": epoch(stamps.pop())}


def rate_bounds(
    points: list[Point], s2: tuple[float, float], window: float
) -> tuple[float, float] | None:
    """The rate the module's bound allows for one container (cores)."""
    later = counter_bounds(points, s2[0] - SPREAD, s2[1] + SPREAD)
    earlier = counter_bounds(points, s2[0] - window - 2 * SPREAD, s2[1] - window + 2 * SPREAD)
    if later is None or earlier is None:
        return None
    return max(0.0, later[0] - earlier[1]) / (window + 2 * SPREAD), (later[1] - earlier[0]) / (
        window - 2 * SPREAD
    )


def check_usage(realnode: RealNode, recorder: Recorder, answers: dict[str, Any]) -> list[str]:
    """Every disagreement between the answers and the recorded kubelet (empty: agreement)."""
    second = answers["second"]
    problems: list[str] = []
    with recorder.lock:
        record = recorder.record
        scrapes = [(a, b) for a, b in record.scrapes if a < second + 1 and b > second]
        if len(scrapes) != 1:
            return [
                f"want one recorded scrape in second {second}, found {scrapes} of {record.scrapes}"
            ]
        s2 = (max(second, scrapes[0][0]), min(second + 1, scrapes[0][1]))
        for pod in answers["pods"]["items"]:
            name, window = pod["metadata"]["name"], seconds(pod["window"])
            custom_cpu = [0.0, 0.0]
            custom_memory = [0.0, 0.0]
            for container in pod["containers"]:
                key = (NS, name, container["name"])
                cores = int(Quantity.parse(container["usage"]["cpu"]).value * 10**9)
                memory = int(Quantity.parse(container["usage"]["memory"]).value)
                for source, cpu_points, memory_points in (
                    ("/metrics/resource", record.cpu[key], record.memory[key]),
                    ("/stats/summary", record.summary_cpu[key], record.summary_memory[key]),
                ):
                    bounds = rate_bounds(cpu_points, s2, window)
                    if bounds is None:
                        problems.append(f"{key}: no {source} samples around s2 {s2} and s1")
                        continue
                    low, high = math.floor(bounds[0] * 1e9) - 1, math.ceil(bounds[1] * 1e9)
                    if not low <= cores <= high:
                        problems.append(
                            f"{key}: cpu {cores}n outside [{low}, {high}] from {source}"
                        )
                    span = gauge_range(memory_points, *s2, MEMORY_MARGIN)
                    if span is None or not span[0] <= memory <= span[1]:
                        problems.append(f"{key}: memory {memory} outside {span} from {source}")
                    if source == "/metrics/resource":
                        custom_cpu[0] += bounds[0]
                        custom_cpu[1] += bounds[1]
                        if span is not None:
                            custom_memory[0] += span[0]
                            custom_memory[1] += span[1]
            for resource, (lowest, highest) in (("cpu", custom_cpu), ("memory", custom_memory)):
                [item] = [
                    i
                    for i in answers["custom"][resource]["items"]
                    if i["describedObject"]["name"] == name
                ]
                value = float(Quantity.parse(item["value"]).value)
                # The custom value is a Quantity of the float sum, rounded to its last digit.
                slack = 1e-6 if resource == "cpu" else 0.0
                if not lowest - slack <= value <= highest + slack:
                    problems.append(
                        f"{name}: kube_running_pod_resource_usage {resource} {value} "
                        f"outside [{lowest}, {highest}]"
                    )
        problems += check_node(record, answers["node"])
    return problems


def check_node(record: Any, answer: dict[str, Any]) -> list[str]:
    """The exact comparison of the node's usage (see the module)."""
    second, window = epoch(answer["timestamp"]), seconds(answer["window"])
    later = [t for t in record.node if int(t) == second]
    if len(later) != 1:
        return [f"node: want one recorded sample in second {second}, have {sorted(record.node)}"]
    t2 = later[0]
    earlier = [t for t in record.node if abs(t2 - t - window) < 0.0015]
    if len(earlier) != 1:
        return [f"node: no recorded sample {window}s before {t2}: {sorted(record.node)}"]
    t1 = earlier[0]
    (c2, memory2), (c1, _) = record.node[t2], record.node[t1]
    window_ns = round((t2 - t1) * 1e6) * 1000
    expected = int((int(c2 * 1e9) - int(c1 * 1e9)) / (window_ns / 1e9))
    cores = int(Quantity.parse(answer["usage"]["cpu"]).value * 10**9)
    memory = int(Quantity.parse(answer["usage"]["memory"]).value)
    problems = []
    if abs(cores - expected) > 1:
        problems.append(f"node: cpu {cores}n, the kubelet's samples give {expected}n")
    if memory != int(memory2):
        problems.append(f"node: memory {memory}, the kubelet's sample says {int(memory2)}")
    summary = record.summary_node.get(int(t2))
    if summary is None:
        problems.append(f"node: no /stats/summary recorded for second {int(t2)}")
    elif summary != (round(c2 * 1e9), int(memory2)):
        problems.append(f"node: /stats/summary says {summary}, /metrics/resource {(c2, memory2)}")
    return problems


def test_usage_agrees_with_the_kubelet(
    realnode: RealNode, scraping: tuple[HostServer, Recorder], workload: str
) -> None:
    server, recorder = scraping

    def settled() -> dict[str, Any] | None:
        answers = snapshot(server, workload, realnode.node)
        # Both samples of the answer must postdate the recorder's start, and the record must
        # reach a second past its s2.
        if answers is None or answers["second"] < recorder.record.started + RESOLUTION + 1:
            return None
        return answers

    answers = wait_for("usage of the workload from two recorded scrapes", settled, timeout=120)
    wait_for(
        "the recorder to pass the answer's second",
        lambda: recorder.record.latest > answers["second"] + 2,
        timeout=60,
    )
    problems = check_usage(realnode, recorder, answers)
    assert not problems, (
        "\n".join(problems)
        + f"\nrecorder errors: {recorder.errors[:3]}\n"
        + json.dumps(answers["pods"], indent=1)
    )


def test_a_kubelet_certificate_of_another_ca_is_refused(
    realnode: RealNode, workload: str, tmp_path: Path
) -> None:
    """Direct scraping verifies the kubelet's certificate: with the front-proxy CA (a real CA
    of this cluster that did not sign it) every scrape fails and no usage is served."""
    server = start_host_server(
        realnode, tmp_path, *server_flags(realnode, "direct", realnode.front_proxy_ca)
    )
    try:
        with server.client() as client:

            def failed() -> str | None:
                text = client.get("/metrics").text
                lines = [
                    line
                    for line in text.splitlines()
                    if line.startswith("custom_metrics_server_kubelet_scrapes_total{")
                    and 'outcome="ok"' not in line
                    and not line.endswith(" 0.0")
                ]
                return "\n".join(lines) or None

            wait_for("a failed scrape", failed, timeout=60)
            ok = [
                line
                for line in client.get("/metrics").text.splitlines()
                if line.startswith('custom_metrics_server_kubelet_scrapes_total{outcome="ok"}')
            ]
            assert ok in ([], ['custom_metrics_server_kubelet_scrapes_total{outcome="ok"} 0.0']), ok
            pods = client.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{workload}/pods").json()
            assert pods["items"] == [], pods
        assert "certificate" in server.logs().lower() or "ssl" in server.logs().lower(), (
            server.logs()[-2000:]
        )
    finally:
        stop(server)
