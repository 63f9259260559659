"""What a backend author's tests give a factory that takes `context=`: a `BackendContext` whose
cluster view holds the objects the test names.

    context = backend_context("jobs", objects=[{"resource": "deployments.apps",
                                                 "namespace": "default", "name": "web"}],
                              base_dir=tmp_path)
    backend = make(Settings(database="jobs.db"), context=context)
    await check_backend(backend, cluster=context.cluster, objects=...)

`objects` take the shape of the fixture backend's (and `serving.serve_backends`'s): `resource`
as in request paths (`pods`, `deployments.apps`), `namespace` (omitted or `""` for a
cluster-scoped resource), `name`, `labels`. The view knows the built-in REST mappings, as the
server's does without a cluster backend; it is always ready.

Cost: O(objects). No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from custom_metrics_server.backends.memory import cluster_of
from custom_metrics_server.sdk import BackendContext, ClusterView

__all__ = ["backend_context", "cluster_view"]


def cluster_view(objects: Iterable[Mapping[str, Any]] = ()) -> ClusterView:
    """A cluster view holding `objects` (see the module); ValueError names a bad one."""
    return cluster_of(objects)


def backend_context(
    name: str = "test",
    *,
    objects: Iterable[Mapping[str, Any]] = (),
    cluster: ClusterView | None = None,
    timeout: float = 10.0,
    base_dir: Path | None = None,
    logger: logging.Logger | None = None,
) -> BackendContext:
    """The `BackendContext` the server would give the backend `name`: the cluster view
    (`cluster`, else one holding `objects`), the fetch deadline, the backends file's directory
    (default: the current one) and the logger `custom_metrics_server.backends.<name>`."""
    return BackendContext(
        name=name,
        cluster=cluster if cluster is not None else cluster_view(objects),
        logger=logger or logging.getLogger(f"custom_metrics_server.backends.{name}"),
        timeout=timeout,
        base_dir=base_dir if base_dir is not None else Path.cwd(),
    )
