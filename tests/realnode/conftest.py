"""The real-node tier's fixtures: `realnode`, the shared `../shared/realnode` cluster.

`realnode` (session) is a `tests.realnode.node.RealNode`: `dir`, `kubeconfig` (admin),
`apiserver`, `ca`, `kubelet_url`, `node`, `containerd_sock`, `k8s_bin`,
`metrics_server_kubeconfig` and `kubectl(*args) -> str`. When a realnode is already up
(`$REALNODE_DIR/env.sh`, default /tmp/realnode, and its API server answers) the tests use it
and leave it up; otherwise the fixture runs `<repo>/../shared/realnode/up.sh` (or
`$REALNODE_SCRIPTS/up.sh`) with the tier's settings (`node.UP_ENV`: HPAScaleToZero on, the
DaemonSet, StatefulSet and Job controllers) and `down.sh` at the end of the session. Not
Linux, not root, a Debian package missing: skipped with the reason, a failure under
`CI=true`.

Also `metrics_server` (module): our server on the host, registered with the aggregator.

Every test of the tier carries the `realnode` marker; `make test` leaves them out (the root
conftest deselects the marker unless `-m` names it) and `make test-node` runs them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.realnode.hostserver import (
    HostServer,
    kubernetes_backend,
    register,
    start_host_server,
    stop,
    write_backends,
)
from tests.realnode.node import (
    DEFAULT_DIR,
    NS_PREFIX,
    RealNode,
    bring_down,
    bring_up,
    find_realnode,
    missing_requirements,
    namespace,
)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-node tier: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def realnode() -> Iterator[RealNode]:
    """The realnode, up for the whole session (see the module)."""
    found = find_realnode(DEFAULT_DIR)
    if found is not None:
        yield found
        return
    problems = missing_requirements()
    if problems:
        _unavailable("; ".join(problems))
    started = bring_up(DEFAULT_DIR)
    try:
        yield started
    finally:
        bring_down(DEFAULT_DIR)


@dataclass
class MetricsServer:
    """The module's registered server: its process, and the values it serves from memory
    (a `fixture` backend, routes `rn_*`) beside the Kubernetes backend's real usage."""

    server: HostServer
    backends_file: Path
    namespace: str
    kubernetes: dict[str, Any]
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = field(
        default_factory=dict
    )

    def serve_values(
        self,
        group: str,
        values: list[dict[str, Any]] | None = None,
        external: list[dict[str, Any]] | None = None,
    ) -> None:
        """Replace the memory backend's values of `group` (fixture `values`/`external`
        entries; each test keeps its own group); the server reloads the file within about
        a second (`--backends-config-reload-interval 1s`), so callers wait for the answer."""
        self.groups[group] = (list(values or ()), list(external or ()))
        every_value = [v for vs, _ in self.groups.values() for v in vs]
        every_external = [e for _, es in self.groups.values() for e in es]
        write_backends(
            self.backends_file, [self.kubernetes, memory_backend(every_value, every_external)]
        )


def memory_backend(values: list[dict[str, Any]], external: list[dict[str, Any]]) -> dict[str, Any]:
    """The `fixture` backend entry that answers every metric named `rn_*`. A fixture holds
    the objects its values belong to (its own view, unused here: the Kubernetes backend is
    the cluster view), so each valued object is listed under `objects` too."""
    objects = {
        (v["resource"], v.get("namespace", ""), v["name"]): {
            "resource": v["resource"],
            "namespace": v.get("namespace", ""),
            "name": v["name"],
        }
        for v in values
    }
    return {
        "name": "values",
        "type": "fixture",
        "settings": {"objects": list(objects.values()), "values": values, "external": external},
        "routes": [{"metric": "rn_*"}],
    }


#: The usage scrape's interval for the registered server: short, so the HPA and kubectl top
#: see usage soon after a pod starts (metrics-server's minimum is 10s; ours accepts less).
RESOLUTION = "5s"


@pytest.fixture(scope="module")
def metrics_server(
    realnode: RealNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MetricsServer]:
    """`serve` on the host, registered with the aggregator for custom, external and resource
    metrics (tests/realnode/hostserver.py): the real kubelet scraped directly (its certificate
    verified with the cluster CA), `--enable-metrics-api`, and a memory backend the tests
    fill. Module scope: APIService names are cluster-wide, and the chart's install
    (test_image_pod.py) registers the same ones."""
    workdir = tmp_path_factory.mktemp("metrics-server")
    kubernetes = kubernetes_backend(
        realnode,
        kubeletSource="direct",
        kubeletCertificateAuthority=str(realnode.ca),
        metricResolution=RESOLUTION,
    )
    backends = workdir / "backends.yaml"
    write_backends(backends, [kubernetes, memory_backend([], [])])
    with namespace(realnode, f"{NS_PREFIX}apis") as ns:
        server = start_host_server(
            realnode,
            workdir,
            "--backends-config",
            str(backends),
            "--backends-config-reload-interval",
            "1s",
            "--enable-metrics-api",
            namespace=ns,
        )
        try:
            with register(realnode, server, ns):
                yield MetricsServer(server, backends, ns, kubernetes)
        finally:
            stop(server)
