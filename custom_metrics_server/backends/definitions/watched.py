"""The collections the sources watch in their definition's namespace, and where their watches
come from: the backend's one `kube.shared_watches.WatchGroup` (`SourceTools.watches`, made by
`watch_group`), so every
source of a namespace that needs its Running pods (a `pods` definition, a `prometheus` one
served as an Object metric), its ReplicaSets (a Deployment's ownership), its Services or its
EndpointSlices (an `http` definition) shares one list+watch of each, however many definitions
there are. What a source keeps of them (its selector's pods, its Service) is its sink's choice,
matched on the client.

The group has a pool of connections of its own (`watch_group`): over HTTP/1.1 a watch holds its
connection for its life (5-10 minutes, then the next), so watches sharing the backend's pool
(100 connections) would take every one once 100 ran, and the backend's own calls (the
definitions' list and watch, status writes, Events) would wait and fail ("no free connection").
Its bound, `WATCH_CONNECTIONS`, is one connection per (namespace, collection) watched plus the
lists in flight, far past any namespace count a process can hold file descriptors for.

Cost: none of its own (the group's: kube/shared_watches.py).
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.shared_watches import Collection, Subscriptions, WatchGroup

__all__ = [
    "ENDPOINTSLICES",
    "REPLICASETS",
    "RUNNING_PODS",
    "SERVICES",
    "WATCH_CONNECTIONS",
    "subscriptions",
    "watch_group",
]

#: The watch group's pool: one connection a watch, none kept from the backend's calls.
WATCH_CONNECTIONS: Final = 100_000

#: Running pods only: a pod that stops running leaves as a DELETED event.
RUNNING_PODS: Final = Collection("/api/v1", "pods", "status.phase=Running")
REPLICASETS: Final = Collection("/apis/apps/v1", "replicasets")
SERVICES: Final = Collection("/api/v1", "services")
ENDPOINTSLICES: Final = Collection("/apis/discovery.k8s.io/v1", "endpointslices")


def watch_group(client: KubeClient, *, name: str) -> WatchGroup:
    """The backend's watch group: over a pool of its own to `client`'s API server, closed
    with the group (a stand-in that is no `KubeClient`, a test's, is used as it is)."""
    if not isinstance(client, KubeClient):
        return WatchGroup(client, name=name)
    own = KubeClient(client.connection, max_connections=WATCH_CONNECTIONS)
    return WatchGroup(own, name=name, owns_client=True)


def subscriptions(tools: SourceTools, namespace: str) -> Subscriptions:
    """A source's subscriptions to the shared watches of `namespace` (its definition's)."""
    if not isinstance(tools.watches, WatchGroup):
        raise TypeError("a source that watches needs the server's WatchGroup")
    return Subscriptions(tools.watches, namespace)
