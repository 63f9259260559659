"""Leader election on a real Lease (coordination.k8s.io/v1, optimistic concurrency in real
etcd): two server replicas as the Deployment runs them, each with a pod's host name, share
one Lease; exactly one holds it, and when it stops (SIGTERM, releasing the Lease) the other
takes over. The overlay's own server holds its Lease with only its ServiceAccount's RBAC.

The fake-based twins in tests/kube/test_lease.py keep what a real API server does not stage on
demand: a Lease endpoint that fails with 503 while the leader renews, and the warnings that
follow.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.kube.lease import parse_time
from custom_metrics_server.testing.server_process import ServerProcess, stop_server
from tests.controlplane.conftest import Deployed
from tests.controlplane.deployment import start_deployed_server

pytestmark = pytest.mark.integration

LEASE = "wip-real-lease"


def lease(deployed: Deployed, namespace: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = deployed.plane.get_json(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    )["spec"]
    return spec


def test_the_overlays_server_holds_and_renews_its_lease(deployed: Deployed) -> None:
    first = lease(deployed, "custom-metrics", "custom-metrics-server")
    assert first["holderIdentity"] == socket.gethostname()
    deployed.plane.wait_until(
        lambda: (
            lease(deployed, "custom-metrics", "custom-metrics-server")["renewTime"]
            != first["renewTime"]
        ),
        "a renewal of the Lease",
    )
    renewed = parse_time(lease(deployed, "custom-metrics", "custom-metrics-server")["renewTime"])
    assert renewed is not None
    assert renewed > (parse_time(first["renewTime"]) or 0)


def test_two_replicas_one_leader_and_a_takeover_when_it_stops(
    deployed: Deployed, tmp_path: Path
) -> None:
    plane = deployed.plane
    namespace = plane.create_namespace("wip-real-lease")
    flags = ("--leader-elect-resource-namespace", namespace, "--leader-elect-resource-name", LEASE)
    replicas: dict[str, ServerProcess] = {}
    try:
        for name in ("replica-a", "replica-b"):
            # Admin credentials: the overlay's Role names only its own Lease.
            replicas[name] = start_deployed_server(
                plane,
                deployed.build,
                tmp_path / name,
                *flags,
                replica=name,
                kubeconfig=plane.admin_kubeconfig,
            )
        holder = plane.wait_until(
            lambda: lease(deployed, namespace, LEASE).get("holderIdentity"), "a holder"
        )
        assert holder in replicas
        other = next(name for name in replicas if name != holder)
        time.sleep(1)  # a few of the standby's rounds (every 2 s at most): it must not take over
        assert lease(deployed, namespace, LEASE)["holderIdentity"] == holder
        assert f"acquired lease {LEASE} as {holder}" in replicas[holder].logs()
        assert "acquired lease" not in replicas[other].logs()
        transitions = lease(deployed, namespace, LEASE).get("leaseTransitions", 0)
        stop_server(replicas.pop(holder))
        plane.wait_until(
            lambda: lease(deployed, namespace, LEASE).get("holderIdentity") == other,
            f"{other} to take the Lease over",
            timeout=90,
        )
        assert f"acquired lease {LEASE} as {other}" in replicas[other].logs()
        assert lease(deployed, namespace, LEASE)["leaseTransitions"] > transitions
    finally:
        for server in replicas.values():
            stop_server(server)
        plane.kubectl("delete", "namespace", namespace, "--wait=false")
