"""The aggregator side of `ControlPlane` (a mixin): registering an aggregated server that
listens on loopback, and waiting for its APIServices to be Available.

How the aggregator reaches a server on 127.0.0.1: with `--enable-aggregator-routing=true` it
dials an EndpointSlice address, but API validation refuses loopback endpoint addresses
(127.0.0.0/8, ::1), so that way is closed. With routing off (the tier's setting) it dials the
Service, and for a Service of type ExternalName its resolver answers `externalName:port`:
`register_apiservice` creates a Service `externalName: localhost` and APIServices on the
server's port with a `caBundle`, so the server's certificate must name
`<service>.<namespace>.svc` (the aggregator checks the name) and chain to that bundle.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = ["ApiServices"]

T = TypeVar("T")


class _Plane(Protocol):
    def apply(
        self,
        documents: str | Sequence[dict[str, Any]],
        *,
        dry_run: bool = False,
        kubeconfig: Path | None = None,
        field_manager: str = "cms-tests",
    ) -> subprocess.CompletedProcess[str]: ...

    def get_json(self, path: str) -> Any: ...

    def apiservice_conditions(self, name: str) -> dict[str, dict[str, Any]]: ...

    def wait_until(
        self,
        predicate: Callable[[], T],
        what: str,
        *,
        timeout: float = 60,
        interval: float = 0.1,
        process: str | None = None,
        detail: Callable[[], str] | None = None,
    ) -> T: ...


class ApiServices:
    """APIService registration and availability, mixed into `ControlPlane`."""

    def register_apiservice(
        self: _Plane,
        port: int,
        ca_pem: bytes,
        *,
        namespace: str,
        service: str = "custom-metrics-server",
        versions: Sequence[tuple[str, str, int]] = (
            ("custom.metrics.k8s.io", "v1beta2", 200),
            ("custom.metrics.k8s.io", "v1beta1", 100),
            ("external.metrics.k8s.io", "v1beta1", 100),
        ),
    ) -> list[str]:
        """Register a server listening on 127.0.0.1:`port` for `versions` (group, version,
        versionPriority), through an ExternalName Service `namespace/service` (module
        docstring); its certificate must name `<service>.<namespace>.svc` and chain to
        `ca_pem`. Returns the APIService names."""
        bundle = base64.b64encode(ca_pem).decode()
        objects: list[dict[str, Any]] = [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": service, "namespace": namespace},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            }
        ]
        names = []
        for group, version, priority in versions:
            names.append(f"{version}.{group}")
            objects.append(
                {
                    "apiVersion": "apiregistration.k8s.io/v1",
                    "kind": "APIService",
                    "metadata": {"name": f"{version}.{group}"},
                    "spec": {
                        "group": group,
                        "version": version,
                        "groupPriorityMinimum": 100,
                        "versionPriority": priority,
                        "caBundle": bundle,
                        "service": {"namespace": namespace, "name": service, "port": port},
                    },
                }
            )
        self.apply(objects)
        return names

    def apiservice_conditions(self: _Plane, name: str) -> dict[str, dict[str, Any]]:
        """The APIService's conditions by type."""
        document = self.get_json(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")
        return {c["type"]: c for c in document.get("status", {}).get("conditions", [])}

    def wait_available(self: _Plane, names: Sequence[str], timeout: float = 60) -> None:
        """Wait until every APIService in `names` is Available; the failure names the
        conditions last seen."""
        last: dict[str, Any] = {}

        def available() -> bool:
            for name in names:
                last[name] = self.apiservice_conditions(name).get("Available", {})
            return all(c.get("status") == "True" for c in last.values())

        self.wait_until(
            available,
            f"APIServices {list(names)} Available",
            timeout=timeout,
            detail=lambda: json.dumps(last, indent=1),
        )
