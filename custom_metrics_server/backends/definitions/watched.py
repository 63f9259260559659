"""The collections the sources watch in their definition's namespace, and where their watches
come from: the server's one `kube.shared_watches.WatchGroup` (`SourceTools.watches`), so every
source of a namespace that needs its Running pods (a `pods` definition, a `prometheus` one
served as an Object metric), its ReplicaSets (a Deployment's ownership), its Services or its
EndpointSlices (an `http` definition) shares one list+watch of each, however many definitions
there are. What a source keeps of them (its selector's pods, its Service) is its sink's choice,
matched on the client.

Cost: none of its own (the group's: kube/shared_watches.py).
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.kube.shared_watches import Collection, Subscriptions, WatchGroup

__all__ = ["ENDPOINTSLICES", "REPLICASETS", "RUNNING_PODS", "SERVICES", "subscriptions"]

#: Running pods only: a pod that stops running leaves as a DELETED event.
RUNNING_PODS: Final = Collection("/api/v1", "pods", "status.phase=Running")
REPLICASETS: Final = Collection("/apis/apps/v1", "replicasets")
SERVICES: Final = Collection("/api/v1", "services")
ENDPOINTSLICES: Final = Collection("/apis/discovery.k8s.io/v1", "endpointslices")


def subscriptions(tools: SourceTools, namespace: str) -> Subscriptions:
    """A source's subscriptions to the shared watches of `namespace` (its definition's)."""
    if not isinstance(tools.watches, WatchGroup):
        raise TypeError("a source that watches needs the server's WatchGroup")
    return Subscriptions(tools.watches, namespace)
