"""Whether `serve --workers N` runs worker processes, from the backends it would serve.

Workers run only when every backend is replicable (`plugins.replicas`): each worker runs its
own instance of every backend, which is right for the demo, `fixture`, `prometheus`,
`passthrough` and plugins declaring `sdk.Replicable`, and wrong for backends that watch and
scrape (`kubernetes`, `pod-metrics`: N copies of their lists, watches and scrapes). With such a
backend the server serves from this one process, so that a Deployment that sets `--workers`
keeps running, and says so in one WARNING line naming the backends and where the measurement is
(a main process forwarding to its workers was measured slower than one process:
docs/performance.md, "Workers").

PURE (the command line logs the line); O(backends).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from custom_metrics_server.plugins.loader import Loaded
from custom_metrics_server.plugins.replicas import is_replicable

__all__ = ["WorkersPlan", "plan_workers"]


@dataclass(frozen=True, slots=True)
class WorkersPlan:
    """How many processes serve the port, and the start-up line that says why."""

    #: worker processes to start; 1: this process serves the port itself
    workers: int
    line: str
    level: int


def plan_workers(requested: int, loaded: Loaded) -> WorkersPlan:
    """The plan for `--workers requested` (> 1) over the backends of `loaded`."""
    held = [f"{b.name} ({b.entry.type})" for b in loaded.built if not is_replicable(b)]
    if held:
        return WorkersPlan(
            1,
            f"--workers {requested} ignored: serving from this one process, since worker "
            f"processes need every backend to be replicable and {_these(held)} not: "
            f'{", ".join(held)} (measured: docs/performance.md, "Workers")',
            logging.WARNING,
        )
    names = ", ".join(f"{b.name} ({b.entry.type})" for b in loaded.built) or "none"
    return WorkersPlan(
        requested,
        f"--workers {requested}: {requested} worker processes, each serving the whole API "
        f"with its own backends; this process only supervises (every backend is "
        f"replicable: {names})",
        logging.INFO,
    )


def _these(held: list[str]) -> str:
    return "this one is" if len(held) == 1 else "these are"
