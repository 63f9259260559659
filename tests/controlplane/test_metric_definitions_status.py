"""MetricDefinitions' status and Events written by the real server process against a real
kube-apiserver (docs/metric-definitions.md, "The status"), with exactly the server's RBAC
(manifests/base's ClusterRole bound to the replica's user):

* a schedule definition: `Valid` and `Ready` True, its value, `observedGeneration`, a Normal
  Event, and `kubectl get metricdefinitions` showing READY and VALUE; a change of its spec is
  written at once with the new generation;
* a definition only the server can refuse (an unknown time zone): `Valid` False with the
  reason, `Ready` False, a Warning Event;
* a definition of a name a platform backend lists (a plugin whose listing a test changes by
  writing a file): `Ready` False `ShadowedByPlatform` naming the backend, `route.shadowedBy`,
  a Warning Event, `kubectl get -o wide`'s columns and `?explain=1`; when the backend stops
  listing the name, the definition serves by itself, with a Normal Event;
* a resourceVersion conflict staged for real: tests/controlplane/test_metric_definitions_conflict.py
  (a module of its own: this module's replica would write the status first);
* two replicas: tests/controlplane/test_metric_definitions_replicas.py (a module of its own,
  so that this module's replica is not running beside them).

Metric names here are this module's own (as in the replicas and HPA modules): every server of
the session watches every namespace, and a namespace's deletion removes nothing without
kube-controller-manager.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.testing.server_process import ServerProcess, start_server, stop_server
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.deployment import ROOT, kustomize
from tests.controlplane.test_metric_definitions import CRD_DIR, CRD_NAME, GROUP, VERSION
from tests.controlplane.test_metric_definitions_serving import constant, definition

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
LEASE = "mdef-status-lease"


def install(plane: ControlPlane) -> None:
    """The CRD, and the server's ClusterRole of manifests/base."""
    plane.kubectl("apply", "--server-side", "--field-manager=cms-tests", "-k", str(CRD_DIR))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    (role,) = [
        o
        for o in kustomize(plane, ROOT / "manifests" / "base")
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "custom-metrics-server"
    ]
    plane.apply([role])


def replica_user(plane: ControlPlane, user: str, lease_namespace: str) -> Path:
    """A kubeconfig of `user`, bound to the server's ClusterRole and to the Lease (a Role in
    `lease_namespace`, as manifests/base's leader-election Role grants it)."""
    plane.apply(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": f"mdef-status-{user}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "custom-metrics-server",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "lease", "namespace": lease_namespace},
                "rules": [
                    {
                        "apiGroups": ["coordination.k8s.io"],
                        "resources": ["leases"],
                        "verbs": ["get", "create", "update"],
                    }
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"lease-{user}", "namespace": lease_namespace},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "lease",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        ]
    )
    return plane.user_kubeconfig(user)


def start_replica(
    plane: ControlPlane,
    workdir: Path,
    kubeconfig: Path,
    *,
    name: str,
    lease_namespace: str = "",
    platform: Path | None = None,
) -> ServerProcess:
    """The server with the `metric-definitions` backend; with `lease_namespace`, leader
    election on `LEASE` there, as replica `name` (its host name, its Lease identity); with
    `platform`, a platform backend `platform` listing the external names written in that file
    (`tests.fakes.plugins:listed_from_file`)."""
    settings: Obj = {"kubeconfig": str(kubeconfig), "limits": {"minInterval": "5s"}}
    if lease_namespace:
        settings |= {
            "leaderElect": True,
            "leaderElectResourceNamespace": lease_namespace,
            "leaderElectResourceName": LEASE,
        }
    workdir.mkdir(parents=True, exist_ok=True)
    entries: list[Obj] = [
        {"name": "metric-definitions", "type": "metric-definitions", "settings": settings}
    ]
    if platform is not None:
        entries.append(
            {
                "name": "platform",
                "type": "tests.fakes.plugins:listed_from_file",
                "settings": {"file": str(platform)},
            }
        )
    backends = workdir / "backends.yaml"
    backends.write_text(yaml.safe_dump({"backends": entries}))
    return start_server(
        workdir,
        "--backends-config",
        str(backends),
        timeout=60,
        env={"CMS_REPLICA_NAME": name, "PYTHONPATH": str(ROOT)},
        module="tests.controlplane.replica",
    )


@pytest.fixture(scope="module")
def writer_ns(control_plane: ControlPlane) -> str:
    install(control_plane)
    return control_plane.create_namespace("mdef-status")


@pytest.fixture(scope="module")
def platform_listing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The names the server's platform backend lists, one a line (none at first)."""
    listing = tmp_path_factory.mktemp("platform") / "listed.txt"
    listing.write_text("")
    return listing


@pytest.fixture(scope="module")
def server(
    control_plane: ControlPlane,
    writer_ns: str,
    platform_listing: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerProcess]:
    """One replica (no leader election), with the server's RBAC, and a platform backend
    listing what `platform_listing` says."""
    kubeconfig = replica_user(control_plane, "mdef-status-single", writer_ns)
    process = start_replica(
        control_plane,
        tmp_path_factory.mktemp("status"),
        kubeconfig,
        name="single",
        platform=platform_listing,
    )
    yield process
    stop_server(process)


def path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/metricdefinitions/{name}"


def conditions(obj: Obj) -> dict[str, Obj]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def written(plane: ControlPlane, namespace: str, name: str, ready: str) -> Obj:
    """The object once its status says `Ready` is `ready`."""

    def found() -> Obj:  # {} (falsy) until then
        obj: Obj = plane.get_json(path(namespace, name))
        return obj if conditions(obj).get("Ready", {}).get("status") == ready else {}

    return plane.wait_until(
        found,
        f"{namespace}/{name}'s status Ready {ready}",
        detail=lambda: json.dumps(plane.get_json(path(namespace, name)).get("status")),
    )


def events(plane: ControlPlane, namespace: str, name: str) -> list[Obj]:
    listing = plane.get_json(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    found: list[Obj] = [e for e in listing["items"] if e["regarding"]["name"] == name]
    return sorted(found, key=lambda e: e["eventTime"])


def test_a_schedule_definition_is_valid_and_ready_with_its_value_and_an_event(
    control_plane: ControlPlane, server: ServerProcess
) -> None:
    plane = control_plane
    shop = plane.create_namespace("mdef-status-shop")
    plane.apply([definition(shop, "office-hours", "office_load", constant(7))])
    obj = written(plane, shop, "office-hours", "True")
    status = obj["status"]
    found = conditions(obj)
    assert (found["Valid"]["status"], found["Valid"]["reason"]) == ("True", "Accepted")
    assert found["Ready"]["reason"] == "Serving"
    assert status["observedGeneration"] == obj["metadata"]["generation"] == 1
    assert (status["lastValue"], status["valueCount"]) == ("7", 1)
    assert status["route"] == {"api": "external"}
    assert "lastError" not in status
    (event,) = plane.wait_until(lambda: events(plane, shop, "office-hours"), "the Ready event")
    assert (event["type"], event["reason"]) == ("Normal", "Serving")
    assert "office_load" in event["note"]
    assert event["regarding"]["uid"] == obj["metadata"]["uid"]
    assert event["reportingController"] == "metrics.custom-metrics-server.io/status-writer"
    # What a team sees at a glance (kubectl's printer columns).
    table = plane.kubectl("get", "metricdefinitions", "-n", shop).stdout.splitlines()
    assert table[0].split() == ["NAME", "METRIC", "SOURCE", "READY", "VALUE", "AGE"]
    assert table[1].split()[:5] == ["office-hours", "office_load", "Schedule", "True", "7"]
    # A new spec: written at once (a new observedGeneration), not a minute later.
    plane.apply([definition(shop, "office-hours", "office_load", constant(9))])

    def regenerated() -> Obj:  # {} (falsy) until then
        now: Obj = plane.get_json(path(shop, "office-hours"))
        return now if now["status"].get("observedGeneration") == 2 else {}

    again = plane.wait_until(regenerated, "observedGeneration 2")
    assert again["status"]["lastValue"] == "9"
    # Ready stayed True: its transition time is the first one, and no second Event.
    assert conditions(again)["Ready"]["lastTransitionTime"] == found["Ready"]["lastTransitionTime"]
    assert len(events(plane, shop, "office-hours")) == 1


def test_an_unknown_time_zone_is_not_valid_with_its_reason_and_a_warning(
    control_plane: ControlPlane, server: ServerProcess
) -> None:
    plane = control_plane
    shop = plane.create_namespace("mdef-status-tz")
    source = constant(3)
    source["schedule"]["timeZone"] = "Mars/Olympus_Mons"  # well-formed, not in the database
    plane.apply([definition(shop, "martian", "st_martian_load", source)])
    obj = written(plane, shop, "martian", "False")
    found = conditions(obj)
    assert (found["Valid"]["status"], found["Valid"]["reason"]) == ("False", "UnknownTimeZone")
    assert "Mars/Olympus_Mons" in found["Valid"]["message"]
    assert found["Ready"]["reason"] == "NotValid"
    assert "lastValue" not in obj["status"]
    (event,) = plane.wait_until(lambda: events(plane, shop, "martian"), "the Warning event")
    assert (event["type"], event["reason"]) == ("Warning", "NotValid")
    assert "UnknownTimeZone" in event["note"]


def test_a_name_the_platform_lists_shadows_the_definition_until_it_stops_listing_it(
    control_plane: ControlPlane, server: ServerProcess, platform_listing: Path
) -> None:
    plane = control_plane
    team = plane.create_namespace("mdef-status-platform")
    metric = "st_platform_queue"
    platform_listing.write_text(f"{metric}\n")
    with server.client() as client:
        url = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{team}/{metric}"

        def answered(value: str) -> bool:
            reply = client.get(url)
            return reply.status_code == 200 and [i["value"] for i in reply.json()["items"]] == [
                value
            ]

        plane.wait_until(lambda: answered("1"), "the platform backend answering the name")
        plane.apply([definition(team, "queue", metric, constant(5))])
        obj = written(plane, team, "queue", "False")
        status = obj["status"]
        found = conditions(obj)
        assert (found["Valid"]["status"], found["Valid"]["reason"]) == ("True", "Accepted")
        assert found["Ready"]["reason"] == "ShadowedByPlatform"
        assert "backend platform (it lists the metric)" in found["Ready"]["message"]
        assert status["route"] == {"api": "external", "shadowedBy": "backend platform"}
        assert "lastValue" not in status
        (warning,) = plane.wait_until(lambda: events(plane, team, "queue"), "the Warning event")
        assert (warning["type"], warning["reason"]) == ("Warning", "ShadowedByPlatform")
        assert "backend platform" in warning["note"]
        table = plane.kubectl("get", "metricdefinitions", "-n", team, "-o", "wide").stdout
        header, row = table.splitlines()
        assert header.split()[-3:] == ["SERVED-AS", "REASON", "SHADOWED-BY"]
        assert row.split()[-3:] == ["ShadowedByPlatform", "backend", "platform"]
        assert answered("1")  # the platform answers, not the definition
        explained = client.get(url, params={"explain": "1"}).json()
        (shadow,) = explained["route"]["shadows"]
        assert [(d["name"], d["reason"]) for d in shadow["definitions"]] == [
            ("queue", "ShadowedByPlatform")
        ]
        # The platform stops listing the name: the definition serves by itself.
        platform_listing.write_text("")
        obj = written(plane, team, "queue", "True")
        assert conditions(obj)["Ready"]["reason"] == "Serving"
        assert obj["status"]["route"] == {"api": "external"}
        assert obj["status"]["lastValue"] == "5"
        plane.wait_until(lambda: answered("5"), "the definition answering the name")
        normal = plane.wait_until(
            lambda: [e for e in events(plane, team, "queue") if e["type"] == "Normal"],
            "the Normal event",
        )
        assert normal[0]["reason"] == "Serving"
