"""Which way `serve --workers N` runs, from the backends it would serve.

A backend is *replicable* when one instance per worker process is as good as one instance:
its answers agree across instances and what it does in the background costs its sources
little when repeated N times. Built-in types say so in their `Provision` (the demo: values
are a pure function of seed and time; the fixture: static; Prometheus: stateless per query,
its series relist repeated per instance; pass-through: a stateless proxy); plugins through
the optional `sdk.Replicable` capability (`replicable = True`, contract 1.1; absent means
not). The Kubernetes and pod-metrics backends are not (watches, kubelet and pod scrapes).

* every backend replicable: **replicated**: each worker runs the whole server (its own
  backend instances, the same chain, its own auth caches); the main process only supervises;
* otherwise: **forwarding**: the main process keeps the one instance of every backend and the
  workers forward each gated request to it (`runtime.forward`).

PURE: reads what the loader made; O(backends).
"""

from __future__ import annotations

from dataclasses import dataclass

from custom_metrics_server.plugins.adapter import PluginBackend
from custom_metrics_server.plugins.loader import Built, Loaded

__all__ = ["WorkersMode", "is_replicable", "not_replicable", "workers_mode"]


def is_replicable(built: Built) -> bool:
    """Whether one instance of this backend per worker process is safe (see the module)."""
    if built.provision is not None:
        return built.provision.replicable
    backend = built.host.backend
    if isinstance(backend, PluginBackend):
        # Only a literal True: a truthy method or property must not turn replication on.
        return getattr(backend.plugin, "replicable", False) is True
    return False


@dataclass(frozen=True, slots=True)
class WorkersMode:
    """How the workers serve, and why (the start-up log line says both)."""

    replicated: bool
    why: str

    def describe(self, workers: int) -> str:
        """The one start-up line of `--workers N`."""
        if self.replicated:
            return (
                f"--workers {workers}: replicated: each worker serves the whole API with its "
                f"own backends; the main process only supervises ({self.why})"
            )
        return (
            f"--workers {workers}: forwarding: the workers authenticate and forward every "
            f"request to the main process, which keeps the backends ({self.why})"
        )


def workers_mode(loaded: Loaded) -> WorkersMode:
    """Replicated when every backend is replicable, else forwarding, naming the backends that
    decided it."""
    held = [f"{b.name} ({b.entry.type})" for b in loaded.built if not is_replicable(b)]
    if held:
        return WorkersMode(False, f"not replicable: {', '.join(held)}")
    names = ", ".join(f"{b.name} ({b.entry.type})" for b in loaded.built) or "none"
    return WorkersMode(True, f"every backend is replicable: {names}")


def not_replicable(loaded: Loaded) -> list[str]:
    """The backends of `loaded` that are not replicable (for a reload's refusal)."""
    return [b.name for b in loaded.built if not is_replicable(b)]
