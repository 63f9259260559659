"""Whether a backend is *replicable*: safe to run once in each worker of `serve --workers N`.

A backend is *replicable* when one instance per worker process is as good as one instance:
its answers agree across instances and what it does in the background costs its sources
little when repeated N times. Built-in types say so in their `Provision` (the demo: values
are a pure function of seed and time; the fixture: static; Prometheus: stateless per query,
its series relist repeated per instance; pass-through: a stateless proxy); plugins through
the optional `sdk.Replicable` capability (`replicable = True`, contract 1.1; absent means
not).

The Kubernetes and pod-metrics backends *watch* (`Provision.watches`): each instance lists
and watches the cluster and scrapes the kubelets or the pods, so N instances cost the API
server and the kubelets what N replicas of the server cost them. They are replicable only
when the operator accepts that cost (`--workers-replicate-watches`, the `watches` argument
below); their answers then agree across workers as they agree across replicas (each instance
follows the same watches, so they differ only while an event or a scrape round is in flight).

`serve --workers N` runs worker processes only when every backend is replicable
(`workers.plan`); a reload in a worker may not add one that is not (`plugins.live`).

PURE: reads what the loader made; O(backends).
"""

from __future__ import annotations

from custom_metrics_server.plugins.adapter import PluginBackend
from custom_metrics_server.plugins.loader import Built, Loaded

__all__ = ["is_replicable", "not_replicable", "watching"]


def is_replicable(built: Built, *, watches: bool = False) -> bool:
    """Whether one instance of this backend per worker process is safe (see the module);
    `watches`: the operator accepts N copies of the watches and scrapes."""
    if built.provision is not None:
        return built.provision.replicable or (watches and built.provision.watches)
    backend = built.host.backend
    if isinstance(backend, PluginBackend):
        # Only a literal True: a truthy method or property must not turn replication on.
        return getattr(backend.plugin, "replicable", False) is True
    return False


def not_replicable(loaded: Loaded, *, watches: bool = False) -> list[str]:
    """The backends of `loaded` that are not replicable (for a reload's refusal)."""
    return [b.name for b in loaded.built if not is_replicable(b, watches=watches)]


def watching(loaded: Loaded) -> list[Built]:
    """The backends of `loaded` that list, watch and scrape a cluster (`Provision.watches`)."""
    return [b for b in loaded.built if b.provision is not None and b.provision.watches]
