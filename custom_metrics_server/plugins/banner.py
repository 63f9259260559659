"""What `serve --demo` prints to try once it serves: one request per metric API of each backend,
taken from what the backends list now (so a plugin's own metrics are among them), the demo's
curated requests when the demo provides the cluster, and how to reach the server with curl.

Owns the wording of those lines; it must not start or call a backend beyond its listings (which
answer from memory). Cost: O(metrics listed) once, at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from custom_metrics_server.plugins.loader import Loaded

__all__ = ["try_lines"]

CUSTOM: Final = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL: Final = "/apis/external.metrics.k8s.io/v1beta1"
#: The demo's own requests: its web pods' rate and its queue (docs/demo.md).
DEMO: Final = (
    f"{CUSTOM}/namespaces/default/pods/*/http_requests_per_second?labelSelector=app%3Dweb",
    f"{EXTERNAL}/namespaces/default/queue_depth",
)


def example_paths(loaded: Loaded, namespace: str = "default") -> list[str]:
    """One custom and one external request per backend that lists metrics (the first of each
    by name; the demo's curated ones for the demo), in file order."""
    paths: list[str] = list(DEMO) if loaded.demo_core_api is not None else []
    for built in loaded.built:
        if loaded.demo_core_api is not None and built.name == loaded.cluster_backend:
            continue
        backend = built.host.backend
        custom = sorted(
            backend.list_metrics(), key=lambda info: (str(info.group_resource), info.metric)
        )
        if custom:
            info = custom[0]
            where = f"/namespaces/{namespace}" if info.namespaced else ""
            paths.append(f"{CUSTOM}{where}/{info.group_resource}/*/{info.metric}")
        external = sorted(backend.list_external_metrics())
        if external:
            paths.append(f"{EXTERNAL}/namespaces/{namespace}/{external[0]}")
    return paths


def try_lines(
    loaded: Loaded, *, kubeconfig: Path, url: str, cert_file: Path | None
) -> Sequence[str]:
    """The banner's `Try:` block (see the module)."""
    kubectl = f"kubectl --kubeconfig {kubeconfig}"
    paths = example_paths(loaded)
    lines = ["Try:"]
    lines += [f"  {kubectl} get --raw '{path}'" for path in paths]
    if loaded.demo_core_api is not None:
        lines.append(f"  {kubectl} top pods -A")
    if paths:
        explain = f"{paths[-1]}{'&' if '?' in paths[-1] else '?'}explain=1"
        lines.append(f"  {kubectl} get --raw '{explain}'  # how it was answered")
    if cert_file is not None and cert_file.exists() and paths:
        # The file holds the serving certificate and the CA that signed it: curl trusts both.
        lines.append(f"  curl --cacert {cert_file} '{url}{paths[0]}'")
    return lines
