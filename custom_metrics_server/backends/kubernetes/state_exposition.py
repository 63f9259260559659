"""`/metrics/resources` of a `ClusterState`: the pods' records walked at scrape time,
whole (:func:`render_state_exposition`) or streamed (:func:`stream_state_exposition`, what
the server sends). The requests and limits are those kube-scheduler's own collector reports
(`PodResourcesOptions{}`: the spec, pod-level resources included, resize status not).

Cost: O(pods x resources) plus the sort of the rendered lines (see :mod:`resources.exposition` and
:mod:`resources.exposition_stream`).
"""

from __future__ import annotations

from collections.abc import Iterator

from custom_metrics_server.cluster_state.records import ClusterState
from custom_metrics_server.resources.exposition import PodResources, render_pod_resources
from custom_metrics_server.resources.exposition_stream import stream_pod_resources
from custom_metrics_server.resources.lifecycle import resource_unit

__all__ = ["render_state_exposition", "stream_state_exposition"]


def render_state_exposition(state: ClusterState) -> bytes:
    """`/metrics/resources` of every non-completed pod, walked at scrape time without copying
    the records: the requests and limits kube-scheduler's own collector reports
    (`PodResourcesOptions{}`: the spec, pod-level resources included, resize status not).
    O(pods x resources) plus the sort of the rendered lines."""
    return render_pod_resources(
        (
            PodResources(
                pod.namespace,
                pod.name,
                pod.node,
                pod.scheduler,
                pod.priority,
                {k: float(v) for k, v in pod.metric_requests.items()},
                {k: float(v) for k, v in pod.metric_limits.items()},
            )
            for pod in state.pods.values()
            if pod.lifecycle != "Completed"
        ),
        unit=resource_unit,
    )


def stream_state_exposition(state: ClusterState) -> Iterator[bytes]:
    """The bytes of `render_state_exposition`, in chunks of about 256 KiB: the pods are
    snapshotted (one reference each) when the first chunk is asked for, and only one group's
    text and one chunk are alive at a time (`exposition_stream`). The caller must ask for
    the first chunk on the thread that changes the state (the event loop)."""
    return stream_pod_resources(
        (pod for pod in state.pods.values() if pod.lifecycle != "Completed"), unit=resource_unit
    )
