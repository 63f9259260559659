"""The deployment files against the real API server: every object of every kustomize build
(overlays, components, examples; kubectl's own kustomize) and of the Helm chart at each of its
documented values files is accepted by server-side apply (`--dry-run=server` where the object
exists already or would clash, which still runs admission, defaulting and validation); and the
server, started with only the RBAC the files grant (its ServiceAccount's token), uses no
permission it lacks and leaves unused only the grants listed in `UNUSED` with their reason.

The cert-manager and Prometheus Operator kinds (Certificate, Issuer, ServiceMonitor) need their
CRDs, which those projects ship: `third_party_crds` installs stand-ins that accept any spec,
so those objects are checked for their API group, version, kind and metadata only.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from custom_metrics_server.testing.server_process import stop_server
from tests import tools
from tests.controlplane.cluster import ControlPlane, free_port
from tests.controlplane.conftest import Deployed
from tests.controlplane.deployment import (
    ROOT,
    Build,
    Obj,
    deploy,
    direct_client,
    kustomize,
    route,
    start_deployed_server,
)
from tests.controlplane.permissions import Permission, covers, granted, uses

pytestmark = pytest.mark.integration

CHART = ROOT / "charts" / "custom-metrics-server"
CHART_NAMESPACE = "wip-real-chart"
COMPONENTS = ["node-agent", "prometheus", "resource-metrics"]
KUSTOMIZE = [
    "base",
    "overlays/production",
    "overlays/cert-manager",
    "overlays/prometheus",
    "examples",
    *(f"components/{c}" for c in COMPONENTS),
]
CHART_VALUES = ["(defaults)", *sorted(p.stem for p in (CHART / "examples").glob("*.yaml"))]

#: Grants the server does not use in this tier, and why. The test fails when one is used (then
#: it is no longer extra: drop it here) or when a grant not listed goes unused (an extra
#: permission: remove it from the files, or list it with its reason).
UNUSED: dict[Permission, str] = {
    **{
        ("get", group, resource): "the server reads these kinds by list and watch only"
        for group, resource in [
            ("", "pods"),
            ("", "nodes"),
            ("", "namespaces"),
            ("apps", "replicasets"),
            ("apps", "deployments"),
            ("apps", "statefulsets"),
            ("apps", "daemonsets"),
            ("batch", "jobs"),
        ]
    },
    **{
        (verb, group, resource): "no code path reads Services or Ingresses "
        "(cluster_state/records.py WATCHED lists what the Kubernetes backend watches): a candidate for removal"
        for verb in ("get", "list", "watch")
        for group, resource in [("", "services"), ("networking.k8s.io", "ingresses")]
        if (verb, resource) not in {("list", "services"), ("watch", "services")}
    },
    **dict.fromkeys(
        [
            ("list", "", "services"),
            ("watch", "", "services"),
            ("list", "discovery.k8s.io", "endpointslices"),
            ("watch", "discovery.k8s.io", "endpointslices"),
        ],
        "the metric-definitions backend's http sources watch a Service and its EndpointSlices "
        "in the definition's namespace; the deployed files do not enable that backend",
    ),
    ("get", "", "nodes/metrics"): "what a kubelet authorizes with --kubelet-source=direct; the "
    "kubelet, not the server, asks for it (the real-node tier)",
    **dict.fromkeys(
        [
            ("list", "metrics.custom-metrics-server.io", "metricdefinitions"),
            ("watch", "metrics.custom-metrics-server.io", "metricdefinitions"),
            ("update", "metrics.custom-metrics-server.io", "metricdefinitions/status"),
            ("create", "events.k8s.io", "events"),
        ],
        "the deployed files do not enable the metric-definitions backend (off unless the "
        "backends file has its entry); tests/controlplane/test_metric_definitions_status.py "
        "runs it and sees these calls",
    ),
}


@pytest.fixture(scope="module")
def third_party_crds(control_plane: ControlPlane) -> None:
    """Stand-in CRDs for cert-manager's Certificate and Issuer, and ServiceMonitor."""
    crds: list[Obj] = []
    for group, kind, plural in [
        ("cert-manager.io", "Certificate", "certificates"),
        ("cert-manager.io", "Issuer", "issuers"),
        ("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
    ]:
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {
                    "group": group,
                    "scope": "Namespaced",
                    "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": True,
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    ],
                },
            }
        )
    control_plane.apply(crds)
    for crd in crds:
        control_plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )


def manifests_copy(deployed: Deployed) -> Path:
    """The copy of manifests/ the deployed build came from (with generated certificates)."""
    return deployed.build.certs.parents[2]


def kustomize_objects(deployed: Deployed, target: str) -> list[Obj]:
    root = manifests_copy(deployed)
    if target.startswith("components/"):
        # A component builds only on top of a kustomization: the production overlay here.
        overlay = root / "overlays" / f"with-{target.split('/')[1]}"
        overlay.mkdir(exist_ok=True)
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": ["../production"],
                    "components": [f"../../{target}"],
                }
            )
        )
        return kustomize(deployed.plane, overlay)
    return kustomize(deployed.plane, root / target)


def assert_accepted(plane: ControlPlane, objects: list[Obj], *, dry_run: bool = True) -> None:
    """Server-side apply of `objects`; every one reported applied."""
    result = plane.apply(objects, dry_run=dry_run)
    applied = [line for line in result.stdout.splitlines() if "serverside-applied" in line]
    assert len(applied) == len(objects), result.stdout + result.stderr


@pytest.mark.parametrize("target", KUSTOMIZE)
def test_every_kustomize_build_is_accepted(
    deployed: Deployed, third_party_crds: None, target: str
) -> None:
    objects = kustomize_objects(deployed, target)
    assert objects
    assert_accepted(deployed.plane, objects)


def helm_template(values: str, namespace: str, release: str) -> list[Obj]:
    helm = tools.require("helm", prefer_tools_dir=True)
    args = [helm, "template", release, str(CHART), "--namespace", namespace]
    if values != "(defaults)":
        args += ["--values", str(CHART / "examples" / f"{values}.yaml")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.mark.parametrize("values", CHART_VALUES)
def test_every_documented_chart_values_file_is_accepted(
    deployed: Deployed, third_party_crds: None, values: str
) -> None:
    # In a namespace of its own: the overlay's Deployment of the same name in custom-metrics
    # has another (immutable) selector, which is right, and not what is under test here.
    namespace = "wip-real-chart-values"
    deployed.plane.apply(
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}]
    )
    objects = helm_template(values, namespace, "custom-metrics-server")
    assert objects
    assert_accepted(deployed.plane, objects)


def check_permissions(plane: ControlPlane, build: Build) -> None:
    """No permission of the build's ServiceAccount was only ever refused, each it used was
    granted by the build's RBAC (or to every authenticated identity: SelfSubjectAccessReviews),
    and the grants left unused are exactly `UNUSED`. (A kube-apiserver that has just restarted,
    as other tests of the tier make it, answers 403 to everything for about a second, until its
    RBAC informers have synced: those refusals of a permission also allowed are not counted.)"""
    grants = granted(plane, build)
    used = uses(plane, build.user)
    allowed = {u.permission for u in used if u.code != 403}
    refused = {u.permission for u in used if u.code == 403} - allowed
    assert not refused, f"{build.user} was refused: {refused}"
    everyone = {("create", "authorization.k8s.io", "selfsubjectaccessreviews")}
    ungranted = {u.permission for u in used if not covers(grants | everyone, u.permission)}
    assert not ungranted, f"used without a grant in the files: {ungranted}"
    # The start-up access check's list: what it asks the API server must be granted.
    assert covers(grants, ("create", "authentication.k8s.io", "tokenreviews"))
    assert covers(grants, ("create", "authorization.k8s.io", "subjectaccessreviews"))
    assert ("create", "authorization.k8s.io", "selfsubjectaccessreviews") in {
        u.permission for u in used
    }, "the start-up access check did not run"
    unused = {g for g in grants if not any(covers([g], u.permission) for u in used)}
    assert unused == set(UNUSED), (
        f"unused now but not listed: {sorted(unused - set(UNUSED))}; "
        f"listed but used: {sorted(set(UNUSED) - unused)}"
    )


@pytest.fixture
def scrape_target(control_plane: ControlPlane) -> Iterator[str]:
    """A Node at 127.0.0.1: the server's scrape goes through the node proxy, which checks
    nodes/proxy and then refuses the loopback address (400), as it would fail for a node that
    is down."""
    name = "wip-real-node-closed"
    control_plane.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}])
    status = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": free_port()}},
        },
    }
    control_plane.kubectl(
        "apply",
        "--server-side",
        "--subresource=status",
        "--field-manager=cms-tests",
        "-f",
        "-",
        input=yaml.safe_dump(status),
    )
    yield name
    control_plane.kubectl("delete", "node", name, "--wait=false")


def wait_for_use(plane: ControlPlane, build: Build, permission: Permission) -> None:
    plane.wait_until(
        lambda: any(u.permission == permission for u in uses(plane, build.user)),
        f"{build.user} to use {permission}",
        timeout=90,
    )


def test_the_overlay_grants_exactly_what_the_server_uses(
    deployed: Deployed, scrape_target: str
) -> None:
    plane, build = deployed.plane, deployed.build
    token = plane.service_account_token("custom-metrics", "custom-metrics-server")
    with direct_client(deployed.server, build, token) as client:
        assert client.get("/apis/custom.metrics.k8s.io/v1beta2").status_code == 200
    wait_for_use(plane, build, ("create", "authentication.k8s.io", "tokenreviews"))
    wait_for_use(plane, build, ("get", "", "nodes/proxy"))
    wait_for_use(plane, build, ("update", "coordination.k8s.io", "leases"))  # a renewal
    check_permissions(plane, build)


@pytest.fixture(scope="module")
def chart_build(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The chart at its defaults, release `cms-chart` in a namespace of its own, applied for
    real but for its APIServices (dry-run: the overlay's own hold those names here)."""
    plane = control_plane
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHART_NAMESPACE}}])
    objects = helm_template("(defaults)", CHART_NAMESPACE, "cms-chart")
    apiservices = [o for o in objects if o["kind"] == "APIService"]
    assert_accepted(plane, [o for o in objects if o["kind"] != "APIService"], dry_run=False)
    assert_accepted(plane, apiservices)
    certs = tmp_path_factory.mktemp("chart-certs")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    secret_name = next(
        v["secret"]["secretName"]
        for v in deployment["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    )
    (secret,) = [
        o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == secret_name
    ]
    data: dict[str, Any] = secret["data"]
    for key in ("tls.crt", "tls.key", "ca.crt"):
        (certs / key).write_bytes(base64.b64decode(data[key]))
    return Build(objects, certs, namespace=CHART_NAMESPACE, name=deployment["metadata"]["name"])


def test_the_chart_grants_exactly_what_the_server_uses(
    deployed: Deployed,
    chart_build: Build,
    scrape_target: str,
    tmp_path: Path,
) -> None:
    """The chart's server, started with its ServiceAccount's token beside the overlay's,
    passes its start-up access check and uses exactly what the chart grants; with the chart's
    APIServices registered for a moment instead of the overlay's, they are Available with the
    chart's own caBundle (its generated CA, which the overlay's server does not chain to)."""
    plane = deployed.plane
    server = start_deployed_server(plane, chart_build, tmp_path / "chart-server")
    try:
        token = plane.service_account_token(chart_build.namespace, chart_build.service_account)
        with direct_client(server, chart_build, token) as client:
            assert client.get("/apis/custom.metrics.k8s.io/v1beta2").status_code == 200
        wait_for_use(plane, chart_build, ("create", "authentication.k8s.io", "tokenreviews"))
        wait_for_use(plane, chart_build, ("get", "", "nodes/proxy"))
        wait_for_use(plane, chart_build, ("update", "coordination.k8s.io", "leases"))
        check_permissions(plane, chart_build)
        try:
            plane.apply(chart_build.of_kind("APIService"))
            names = route(plane, chart_build, int(server.url.rsplit(":", 1)[1]))
            plane.wait_available(names)
            ca = (chart_build.certs / "ca.crt").read_bytes()
            for name in names:
                spec = plane.get_json(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}")["spec"]
                assert base64.b64decode(spec["caBundle"]) == ca
                assert spec["service"]["namespace"] == CHART_NAMESPACE
        finally:  # the overlay's registration back, for the rest of the session
            deploy(plane, deployed.build)
            route(plane, deployed.build, deployed.port)
            plane.wait_available(deployed.apiservices)
    finally:
        stop_server(server)
        shutil.rmtree(tmp_path / "chart-server", ignore_errors=True)
