"""What the kubelet served while our server scraped it: the test's own record of the real
kubelet's `/metrics/resource` and `/stats/summary`, and of when the server's scrapes landed.

`Recorder` polls, in one thread and in turn, the kubelet's two endpoints (directly, as the
realnode's admin, the serving certificate verified with the cluster CA) and the server's own
`/metrics` (`custom_metrics_server_kubelet_scrapes_total{outcome="ok"}`), every ~0.1 s. It
keeps:

* every container and node sample of `/metrics/resource` with the kubelet's millisecond
  timestamp (container samples are read live from the CRI at each request, so no two
  requests share one; node samples come from cAdvisor's housekeeping and are served
  unchanged, timestamp and all, to every client until the next housekeeping);
* every `/stats/summary` sample with its time pinned to the request's span on this host's
  clock, intersected with the second the summary names (it truncates to seconds);
* each server scrape as an interval of this host's clock that holds the kubelet's sample
  time of that scrape: after the start of the last `/metrics` poll that did not count it,
  minus the round's duration, and before the end of the first poll that did.

The kubelet, containerd and this process share the host's clock, so all three are on one
time line.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Final

import httpx

from tests.realnode.hostserver import HostServer
from tests.realnode.node import RealNode

Key = tuple[str, str, str]  # namespace, pod, container

_SERIES: Final = re.compile(
    r"^(container_cpu_usage_seconds_total|container_memory_working_set_bytes)"
    r'\{container="([^"]*)",namespace="([^"]*)",pod="([^"]*)"\} (\S+) (\d+)$'
)
_NODE: Final = re.compile(
    r"^(node_cpu_usage_seconds_total|node_memory_working_set_bytes) (\S+) (\d+)$"
)
_SCRAPES: Final = re.compile(
    r'^custom_metrics_server_kubelet_scrapes_total\{outcome="ok"\} (\S+)$', re.M
)
_ROUND: Final = re.compile(
    r"^custom_metrics_server_kubelet_scrape_last_round_duration_seconds (\S+)$", re.M
)


@dataclass(frozen=True)
class Point:
    """A counter or gauge read at a time known to lie in [`earliest`, `latest`] (equal for
    `/metrics/resource`, whose timestamps are the kubelet's own)."""

    earliest: float
    latest: float
    value: float


@dataclass
class Record:
    """Everything recorded so far (read it under `Recorder.lock`)."""

    cpu: dict[Key, list[Point]] = field(default_factory=lambda: defaultdict(list))
    memory: dict[Key, list[Point]] = field(default_factory=lambda: defaultdict(list))
    summary_cpu: dict[Key, list[Point]] = field(default_factory=lambda: defaultdict(list))
    summary_memory: dict[Key, list[Point]] = field(default_factory=lambda: defaultdict(list))
    #: Node samples: kubelet timestamp (s) -> (cpu seconds, working set bytes).
    node: dict[float, tuple[float, float]] = field(default_factory=dict)
    #: Node samples of `/stats/summary`: second -> (cpu nanoseconds, working set bytes).
    summary_node: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Server scrapes: host-clock intervals holding each scrape's kubelet sample time.
    scrapes: list[tuple[float, float]] = field(default_factory=list)
    started: float = 0.0
    latest: float = 0.0


def _seconds(stamp: str) -> int:
    return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())


class Recorder:
    """See the module. `start()`, read `record` under `lock`, `stop()`."""

    def __init__(self, node: RealNode, server: HostServer, *, interval: float = 0.1) -> None:
        self.node, self.server, self.interval = node, server, interval
        self.lock = threading.Lock()
        self.record = Record()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet-recorder", daemon=True)

    def start(self) -> None:
        self.record.started = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        kubelet = httpx.Client(
            base_url=self.node.kubelet_url, verify=self.node.ssl_context(), timeout=10
        )
        server = self.server.client()
        count: float | None = None
        last_poll_start = time.time()
        with kubelet, server:
            turn = 0
            while not self._stop.is_set():
                try:
                    self._resource(kubelet)
                    if turn % 2 == 0:
                        self._summary(kubelet)
                    start = time.time()
                    text = server.get("/metrics").text
                    end = time.time()
                except httpx.HTTPError as error:
                    self.errors.append(repr(error))
                    time.sleep(self.interval)
                    continue
                turn += 1
                scrapes = _SCRAPES.search(text)
                duration = _ROUND.search(text)
                if scrapes and duration:
                    now_count = float(scrapes.group(1))
                    if count is not None and now_count > count:
                        with self.lock:
                            self.record.scrapes.append(
                                (last_poll_start - float(duration.group(1)), end)
                            )
                    count = now_count
                last_poll_start = start
                with self.lock:
                    self.record.latest = end
                self._stop.wait(self.interval)

    def _resource(self, kubelet: httpx.Client) -> None:
        text = kubelet.get("/metrics/resource").text
        cpu: list[tuple[Key, Point]] = []
        memory: list[tuple[Key, Point]] = []
        node: dict[str, tuple[float, float]] = {}
        for line in text.splitlines():
            if match := _SERIES.match(line):
                name, container, namespace, pod, value, stamp = match.groups()
                when = int(stamp) / 1000
                point = Point(when, when, float(value))
                (cpu if name.startswith("container_cpu") else memory).append(
                    ((namespace, pod, container), point)
                )
            elif match := _NODE.match(line):
                node[match.group(1)] = (float(match.group(2)), int(match.group(3)) / 1000)
        with self.lock:
            for key, point in cpu:
                self.record.cpu[key].append(point)
            for key, point in memory:
                self.record.memory[key].append(point)
            if "node_cpu_usage_seconds_total" in node and "node_memory_working_set_bytes" in node:
                cpu_value, when = node["node_cpu_usage_seconds_total"]
                self.record.node[when] = (cpu_value, node["node_memory_working_set_bytes"][0])

    def _summary(self, kubelet: httpx.Client) -> None:
        start = time.time()
        summary = kubelet.get("/stats/summary").json()
        end = time.time()
        with self.lock:
            node = summary["node"]
            self.record.summary_node[_seconds(node["cpu"]["time"])] = (
                int(node["cpu"]["usageCoreNanoSeconds"]),
                int(node["memory"]["workingSetBytes"]),
            )
            for pod in summary.get("pods", ()):
                ref = pod["podRef"]
                for container in pod.get("containers", ()):
                    key = (ref["namespace"], ref["name"], container["name"])
                    cpu, memory = container.get("cpu") or {}, container.get("memory") or {}
                    if "usageCoreNanoSeconds" in cpu:
                        second = _seconds(cpu["time"])
                        earliest, latest = max(start, second), min(end, second + 1)
                        self.record.summary_cpu[key].append(
                            Point(earliest, latest, int(cpu["usageCoreNanoSeconds"]) / 1e9)
                        )
                    if "workingSetBytes" in memory:
                        second = _seconds(memory["time"])
                        earliest, latest = max(start, second), min(end, second + 1)
                        self.record.summary_memory[key].append(
                            Point(earliest, latest, float(memory["workingSetBytes"]))
                        )


def counter_bounds(
    points: list[Point], earliest: float, latest: float
) -> tuple[float, float] | None:
    """Bounds of a non-decreasing counter at an unknown time in [`earliest`, `latest`]: at
    least its value at a point known to be before, at most its value at one known to be
    after. None when the record has no point on one side."""
    before = [p.value for p in points if p.latest <= earliest]
    after = [p.value for p in points if p.earliest >= latest]
    if not before or not after:
        return None
    return max(before), min(after)


def gauge_range(
    points: list[Point], earliest: float, latest: float, margin: float
) -> tuple[float, float] | None:
    """The range a gauge took around [`earliest`, `latest`] (widened by `margin` s)."""
    near = [
        p.value for p in points if p.latest >= earliest - margin and p.earliest <= latest + margin
    ]
    return (min(near), max(near)) if near else None
