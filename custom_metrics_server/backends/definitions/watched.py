"""The collections the sources watch in their definition's namespace, and where their watches
come from: the backend's one `kube.shared_watches.WatchGroup` (`SourceTools.watches`, made by
`watch_group`), so every
source of a namespace that needs its Running pods (a `pods` definition, a `prometheus` one
served as an Object metric), its ReplicaSets (a Deployment's ownership), its Services or its
EndpointSlices (an `http` definition) shares one list+watch of each, however many definitions
there are. What a source keeps of them (its selector's pods, its Service) is its sink's choice,
matched on the client.

The group has a pool of connections of its own (`watch_group`), so that the lists of thousands
of namespaces' collections (at start-up, after a 410) queue behind each other, not in front of
the backend's own calls (the definitions' list and watch, status writes, Events). Its watches,
each holding its connection for its life over HTTP/1.1 (5-10 minutes, then the next), are
held streams, outside the pool's limit (`http_client.http11`), so however many namespaces are
watched, none waits for a connection; the limit, `LIST_CONNECTIONS`, bounds the lists in
flight.

Cost: none of its own (the group's: kube/shared_watches.py).
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.backends.definitions.source import SourceTools
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.shared_watches import Collection, Subscriptions, WatchGroup

__all__ = [
    "ENDPOINTSLICES",
    "LIST_CONNECTIONS",
    "REPLICASETS",
    "RUNNING_PODS",
    "SERVICES",
    "subscriptions",
    "watch_group",
]

#: The watch group's lists in flight at once (its watches are outside the limit).
LIST_CONNECTIONS: Final = 100

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
    own = KubeClient(client.connection, max_connections=LIST_CONNECTIONS)
    return WatchGroup(own, name=name, owns_client=True)


def subscriptions(tools: SourceTools, namespace: str) -> Subscriptions:
    """A source's subscriptions to the shared watches of `namespace` (its definition's)."""
    if not isinstance(tools.watches, WatchGroup):
        raise TypeError("a source that watches needs the server's WatchGroup")
    return Subscriptions(tools.watches, namespace)
