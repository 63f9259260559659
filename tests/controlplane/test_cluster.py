"""The control-plane fixture itself: identities, kubectl, restart and compaction behave as the
tier's tests rely on."""

from __future__ import annotations

import json

import pytest

from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.integration


def whoami(plane: ControlPlane, kubeconfig: object = None) -> dict[str, object]:
    """The identity the API server sees (SelfSubjectReview, `kubectl auth whoami`)."""
    result = plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)  # type: ignore[arg-type]
    info: dict[str, object] = json.loads(result.stdout)["status"]["userInfo"]
    return info


def test_admin_user_and_service_account_identities(control_plane: ControlPlane) -> None:
    assert "system:masters" in whoami(control_plane)["groups"]  # type: ignore[operator]
    alice = whoami(control_plane, control_plane.user_kubeconfig("cp-alice", ("dev",)))
    assert alice["username"] == "cp-alice"
    assert alice["groups"] == ["dev", "system:authenticated"]
    namespace = control_plane.create_namespace("wip-real-cp")
    control_plane.kubectl("-n", namespace, "create", "serviceaccount", "robot")
    robot = whoami(control_plane, control_plane.service_account_kubeconfig(namespace, "robot"))
    assert robot["username"] == f"system:serviceaccount:{namespace}:robot"
    denied = control_plane.kubectl(
        "get", "secrets", "-A", kubeconfig=control_plane.user_kubeconfig("cp-bob"), check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_compaction_and_restart_make_old_continue_tokens_and_versions_gone(
    control_plane: ControlPlane,
) -> None:
    """kube-apiserver 1.36 serves continue tokens from its watch cache's snapshots, which
    an etcd compaction alone does not drop; after a restart the token goes to etcd, where the
    compacted revision is 410 Expired, and a watch from a version before the new cache's
    start is an ERROR event with 410."""
    namespace = control_plane.create_namespace("wip-real-compact")
    for index in range(3):
        control_plane.kubectl("-n", namespace, "create", "configmap", f"c{index}")
    with control_plane.admin_client() as client:
        first = client.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"limit": 1})
        token = first.json()["metadata"]["continue"]
        assert token
        control_plane.kubectl("-n", namespace, "create", "configmap", "after")
        control_plane.compact_etcd()
        control_plane.restart_apiserver()
        gone = client.get(
            f"/api/v1/namespaces/{namespace}/configmaps", params={"limit": 1, "continue": token}
        )
        old_watch = client.get(
            f"/api/v1/namespaces/{namespace}/configmaps",
            params={
                "watch": "1",
                "resourceVersion": first.json()["metadata"]["resourceVersion"],
                "timeoutSeconds": "5",
            },
        )
    assert gone.status_code == 410, gone.text
    assert gone.json()["reason"] == "Expired"
    event = json.loads(old_watch.text.splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false")


def test_controllers_reconcile_a_deployment(control_plane_with_controllers: ControlPlane) -> None:
    plane = control_plane_with_controllers
    namespace = plane.create_namespace("wip-real-kcm")
    plane.kubectl(
        "-n",
        namespace,
        "create",
        "deployment",
        "web",
        "--image=example.invalid/web",
        "--replicas=2",
    )

    def replica_set_pods() -> bool:
        result = plane.kubectl("-n", namespace, "get", "pods", "-l", "app=web", "-o", "name")
        return len(result.stdout.split()) == 2

    plane.wait_until(
        replica_set_pods, "the Deployment's two pods", process="kube-controller-manager"
    )
    plane.kubectl("delete", "namespace", namespace, "--wait=false")
