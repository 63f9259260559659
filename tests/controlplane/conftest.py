"""Fixtures of the control-plane tier: one real etcd + kube-apiserver per test session.

`control_plane` starts it on first use and stops it at the end of the session; tests share it,
so each works in namespaces of its own (`ControlPlane.create_namespace`) and names cluster-wide
objects uniquely. `control_plane_with_controllers` is the same plane with
kube-controller-manager started on it (HPA, deployments, replica sets...; no garbage collector), for tests
whose truth is a controller's. `deployed` is the production overlay applied to it and our
server running as its Deployment says, registered with the aggregator. Without the binaries (see tests/controlplane/binaries.py) the
tests are skipped with the reason, and fail under CI=true: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from custom_metrics_server.testing.server_process import ServerProcess, stop_server
from tests.controlplane.binaries import MissingBinary, find_binary
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.deployment import (
    Build,
    deploy,
    production_build,
    route,
    start_deployed_server,
)


def _require_binaries(*names: str) -> None:
    try:
        for name in names:
            find_binary(name)
    except MissingBinary as err:
        message = f"the control-plane tier needs real Kubernetes binaries: {err}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run this test: {message}")
        pytest.skip(message)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane on loopback, shared by the session."""
    _require_binaries("etcd", "kube-apiserver", "kubectl")
    plane = ControlPlane.start(tmp_path_factory.mktemp("controlplane"))
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def control_plane_with_controllers(control_plane: ControlPlane) -> ControlPlane:
    """`control_plane` with kube-controller-manager running on it (every default but the GC
    controller, the HPA's every 2 s, HPAScaleToZero on)."""
    _require_binaries("kube-controller-manager")
    control_plane.start_controllers()
    return control_plane


@dataclass
class Deployed:
    """The production overlay applied to `control_plane`, and the server it describes running
    out of cluster with its ServiceAccount's token, registered through its APIServices."""

    plane: ControlPlane
    build: Build
    server: ServerProcess
    apiservices: list[str]

    @property
    def port(self) -> int:
        return int(self.server.url.rsplit(":", 1)[1])


@pytest.fixture(scope="session")
def deployed(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployed]:
    """See `Deployed`; its APIServices are Available when the test starts."""
    workdir = tmp_path_factory.mktemp("deployed")
    build = production_build(control_plane, workdir)
    deploy(control_plane, build)
    server = start_deployed_server(control_plane, build, workdir / "server")
    try:
        names = route(control_plane, build, int(server.url.rsplit(":", 1)[1]))
        control_plane.wait_available(names)
        yield Deployed(control_plane, build, server, names)
    finally:
        stop_server(server)
