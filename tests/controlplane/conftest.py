"""Fixtures of the control-plane tier: one real etcd + kube-apiserver per test session.

`control_plane` starts it on first use and stops it at the end of the session; tests share it,
so each works in namespaces of its own (`ControlPlane.create_namespace`) and names cluster-wide
objects uniquely. `control_plane_with_controllers` is the same plane with
kube-controller-manager started on it (HPA, deployments, garbage collection...), for tests
whose truth is a controller's. Without the binaries (see tests/controlplane/binaries.py) the
tests are skipped with the reason, and fail under CI=true: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.controlplane.binaries import MissingBinary, find_binary
from tests.controlplane.cluster import ControlPlane


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
    """`control_plane` with kube-controller-manager running on it (every default
    controller, the HPA's every 2 s, HPAScaleToZero on)."""
    _require_binaries("kube-controller-manager")
    control_plane.start_controllers()
    return control_plane
