"""Two replicas of the server with leader election on one Lease, against a real
kube-apiserver: both watch and serve the definitions, only the Lease holder writes their
status (the audit log's status updates, counted per replica's user), and when it stops the
other takes over and writes, without rewriting what the holder had written.

A module of its own: no other replica of the server may run beside these two (every replica
without leader election writes status), and the control-plane tier's modules run one after
another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server.testing.server_process import ServerProcess, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_metric_definitions_serving import constant, definition
from tests.controlplane.test_metric_definitions_status import (
    LEASE,
    install,
    replica_user,
    start_replica,
    written,
)

pytestmark = pytest.mark.integration


def status_writes(plane: ControlPlane, user: str, names: set[str] | None = None) -> int:
    """Status updates of metricdefinitions (of `names`, when given) that `user` made, from
    the audit log."""
    count = 0
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("user", {}).get("username") == user
            and event.get("verb") == "update"
            and ref.get("resource") == "metricdefinitions"
            and ref.get("subresource") == "status"
            and (names is None or ref.get("name") in names)
        ):
            count += 1
    return count


def test_of_two_replicas_only_the_lease_holder_writes_and_the_other_takes_over(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    plane = control_plane
    install(plane)
    lease_ns = plane.create_namespace("mdef-lease")
    team = plane.create_namespace("mdef-two-replicas")
    users = {name: f"mdef-status-{name}" for name in ("replica-a", "replica-b")}
    replicas: dict[str, ServerProcess] = {}
    try:
        for name, user in users.items():
            kubeconfig = replica_user(plane, user, lease_ns)
            replicas[name] = start_replica(
                plane, tmp_path / name, kubeconfig, name=name, lease_namespace=lease_ns
            )
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{lease_ns}/leases/{LEASE}"
        holder = plane.wait_until(
            lambda: plane.get_json(lease)["spec"].get("holderIdentity"), "a holder"
        )
        other = next(name for name in replicas if name != holder)
        plane.apply(
            [
                definition(team, f"d{index}", f"st_load_{index}", constant(index))
                for index in range(3)
            ]
        )
        for index in range(3):
            written(plane, team, f"d{index}", "True")
        # Both replicas watch and serve the definitions; only the holder writes.
        assert status_writes(plane, users[holder]) >= 3
        assert status_writes(plane, users[other]) == 0
        with replicas[other].client() as client:
            served = client.get(
                f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{team}/st_load_2"
            )
        assert [item["value"] for item in served.json()["items"]] == ["2"]
        # The holder stops (releasing the Lease): the other takes over and writes.
        stop_server(replicas.pop(holder))
        plane.wait_until(
            lambda: plane.get_json(lease)["spec"].get("holderIdentity") == other,
            f"{other} to take the Lease over",
            timeout=90,
        )
        plane.apply([definition(team, "late", "st_late_load", constant(8))])
        assert written(plane, team, "late", "True")["status"]["lastValue"] == "8"
        assert status_writes(plane, users[other], {"late"}) >= 1
        # Taking over, it did not write again what the holder had written (their values'
        # times moved, which it writes a minute after taking over; this check comes seconds
        # after it, and a writer that rewrote everything on takeover would count 3 here).
        assert status_writes(plane, users[other], {"d0", "d1", "d2"}) == 0
    finally:
        for process in replicas.values():
            stop_server(process)
