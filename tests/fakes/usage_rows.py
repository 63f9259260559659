"""Usage rows written by hand, for tests of what reads the usage store: the
:class:`~custom_metrics_server.kubelet_format.samples.UsageRows` a kubelet body with these
containers would read as, without writing the body."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from custom_metrics_server.kubelet_format.samples import (
    CpuSample,
    MemorySample,
    NodeSample,
    PodKey,
    UsageRows,
)


class Container(NamedTuple):
    """One complete container's sample; ``start_time`` None when not reported."""

    cpu_seconds_total: float
    cpu_timestamp: float
    memory_bytes: float
    memory_timestamp: float
    start_time: float | None


def usage_rows(
    pods: Mapping[PodKey, Mapping[str, Container]],
    node: tuple[float, float, float] | None = None,
) -> UsageRows:
    """The rows of ``pods`` (every container complete) and the node's sample, ``node`` being
    (cpu seconds, time, memory); no layout, so the store matches them by name."""
    keys = [(pod, name, sample) for pod, named in pods.items() for name, sample in named.items()]
    node_sample = None
    if node is not None:
        node_sample = NodeSample(CpuSample(node[0], node[1]), MemorySample(node[2], node[1]))
    return UsageRows(
        layout=None,
        pods=[pod for pod, _, _ in keys],
        containers=[name for _, name, _ in keys],
        cpu=[sample.cpu_seconds_total for _, _, sample in keys],
        times=[sample.cpu_timestamp for _, _, sample in keys],
        memory=[sample.memory_bytes for _, _, sample in keys],
        starts=[math.nan if s.start_time is None else s.start_time for _, _, s in keys],
        start_layout=None,
        node=node_sample,
        scrape_error=False,
    )
