"""`/metrics/resources` of a `ClusterState`: the pods' records walked at scrape time, streamed
(:func:`stream_state_exposition`, what the server sends) or whole
(:func:`render_state_exposition`, the chunks joined). The requests and limits are those
kube-scheduler's own collector reports (`PodResourcesOptions{}`: the spec, pod-level resources
included, resize status not).

Cost: O(pods x resources) plus the sort of the rendered lines (see
:mod:`resources.exposition_stream`).
"""

from __future__ import annotations

from collections.abc import Iterator

from custom_metrics_server.cluster_state.records import ClusterState
from custom_metrics_server.resources.exposition_stream import stream_pod_resources
from custom_metrics_server.resources.lifecycle import resource_unit

__all__ = ["render_state_exposition", "stream_state_exposition"]


def render_state_exposition(state: ClusterState) -> bytes:
    """`/metrics/resources` of every non-completed pod, whole: the chunks of
    :func:`stream_state_exposition` joined. O(pods x resources) plus the sort."""
    return b"".join(stream_state_exposition(state))


def stream_state_exposition(state: ClusterState) -> Iterator[bytes]:
    """`/metrics/resources` of every non-completed pod in chunks of about 256 KiB: the pods are
    snapshotted (one reference each) when the first chunk is asked for, and only one group's
    text and one chunk are alive at a time (`exposition_stream`). The caller must ask for
    the first chunk on the thread that changes the state (the event loop)."""
    return stream_pod_resources(
        (pod for pod in state.pods.values() if pod.lifecycle != "Completed"), unit=resource_unit
    )
