"""Whether `serve --workers N` runs worker processes, from the backends it would serve.

Workers run only when every backend is replicable (`plugins.replicas`): each worker runs its
own instance of every backend, which is right for the demo, `fixture`, `prometheus`,
`passthrough` and plugins declaring `sdk.Replicable`. Backends that watch and scrape
(`kubernetes`, `pod-metrics`) are replicable only with the operator's
`--workers-replicate-watches` (`replicate_watches`): each worker then lists, watches and
scrapes on its own, N times what one process asks of the API server and the kubelets (what N
replicas cost them), and the INFO line says so. Without it, such a backend makes the server
serve from this one process, so that a Deployment that sets `--workers` keeps running, and
one WARNING line names the backends, the opt-in, and where the measurement is (a main process
forwarding to its workers was measured slower than one process: docs/performance.md,
"Workers").

PURE (the command line logs the line); O(backends).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from custom_metrics_server.plugins.loader import Built, Loaded
from custom_metrics_server.plugins.replicas import is_replicable, watching

__all__ = ["WorkersPlan", "plan_workers"]


@dataclass(frozen=True, slots=True)
class WorkersPlan:
    """How many processes serve the port, and the start-up line that says why."""

    #: worker processes to start; 1: this process serves the port itself
    workers: int
    line: str
    level: int


def plan_workers(requested: int, loaded: Loaded, *, replicate_watches: bool = False) -> WorkersPlan:
    """The plan for `--workers requested` (> 1) over the backends of `loaded`;
    `replicate_watches`: `--workers-replicate-watches` was given."""
    held = [b for b in loaded.built if not is_replicable(b, watches=replicate_watches)]
    copied = watching(loaded)
    watchers = {id(b) for b in copied}
    if held:
        # The opt-in is named only where it would decide (every backend held watches).
        hint = (
            f"; --workers-replicate-watches runs {_them(held)} once in each worker, at "
            f"{requested} x the lists, watches and scrapes"
            if all(id(b) in watchers for b in held)
            else ""
        )
        return WorkersPlan(
            1,
            f"--workers {requested} ignored: serving from this one process, since worker "
            f"processes need every backend to be replicable and {_these(held)} not: "
            f'{_names(held)} (measured: docs/performance.md, "Workers"){hint}',
            logging.WARNING,
        )
    line = (
        f"--workers {requested}: {requested} worker processes, each serving the whole API "
        f"with its own backends; this process only supervises (every backend is "
        f"replicable: {_names(loaded.built) or 'none'})"
    )
    if copied:
        line += (
            f"; --workers-replicate-watches: every worker lists, watches and scrapes for "
            f"{_names(copied)} on its own, {requested} x what one process asks of the API "
            f"server and the kubelets or pods"
        )
    return WorkersPlan(requested, line, logging.INFO)


def _names(built: list[Built]) -> str:
    return ", ".join(f"{b.name} ({b.entry.type})" for b in built)


def _them(held: list[Built]) -> str:
    return "it" if len(held) == 1 else "them"


def _these(held: list[Built]) -> str:
    return "this one is" if len(held) == 1 else "these are"
