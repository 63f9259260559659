"""metrics.k8s.io/v1beta1 (resource_api): usage per container from the store, the exact JSON
metrics-server writes, selectors, errors, the Table form, routing and authorization."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from custom_metrics_server.api import schemas
from custom_metrics_server.api.core_api import DemoCoreApi
from custom_metrics_server.api.grammar import parse_query
from custom_metrics_server.cluster_state.records import NAMESPACES, NODES, PODS, ClusterState
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.errors import (
    BadRequest,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    StatusError,
)
from custom_metrics_server.kubelet_format.samples import UsageRows
from custom_metrics_server.machinery.quantity import Format, format_quantity
from custom_metrics_server.metrics_api.render import nanocores_quantity
from custom_metrics_server.metrics_api.request import (
    MetricsApiRequest,
    negotiate,
    parse_request,
)
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi
from custom_metrics_server.security.requestinfo import request_attributes
from custom_metrics_server.server.app import AppSettings, create_app
from custom_metrics_server.usage.store import UsageStore
from custom_metrics_server.usage.values import ContainerResourceUsage, ResourceUsage
from tests import kubeproto
from tests.asgi import call, scope_for
from tests.fakes.usage_rows import Container, usage_rows

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
OLD = T0 - 3600.0
NOW = T0 + 100.0  # the clock for creationTimestamp: 2023-11-14T22:15:00Z
V = "/apis/metrics.k8s.io/v1beta1"
SAMPLES = Path(__file__).resolve().parent.parent / "fixtures" / "kubelet-samples"


def pod(
    name: str, ns: str = "ns", *, node: str = "n1", phase: str = "Running", **labels: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "app"}]},
        "status": {"phase": phase},
    }


def cluster() -> ClusterState:
    state = ClusterState()
    objects: dict[GroupResource, list[dict[str, Any]]] = {
        NAMESPACES: [{"metadata": {"name": "ns"}}, {"metadata": {"name": "other"}}],
        NODES: [
            {"metadata": {"name": "n2", "labels": {"zone": "b"}}},
            {"metadata": {"name": "n1", "labels": {"zone": "a"}}},
            {"metadata": {"name": "n3"}},  # one sample only: no usage
        ],
        PODS: [
            pod("web-b", app="web"),
            pod("web-a", app="web", tier="front"),
            pod("db", "other", app="db"),
            pod("young", app="web"),  # one sample only: no usage yet
            pod("done", phase="Succeeded"),  # completed: never listed
        ],
    }
    state.load(objects)
    return state


def containers(*rows: tuple[str, float, float, float]) -> dict[str, Container]:
    """(name, cpu seconds, time, memory) rows of one pod's sample."""
    return {name: Container(cpu, at, memory, at, OLD) for name, cpu, at, memory in rows}


def scrape(
    pods: dict[tuple[str, str], dict[str, Container]], node: tuple[float, float, float]
) -> UsageRows:
    return usage_rows(pods, node)


def store() -> UsageStore:
    """n1: web-a (two containers), web-b, db; n2: nothing but itself; n3 and `young` with
    one sample. Windows: 15 s for n1's pods, 20.038 s for web-b's sidecar-less sample."""
    usage = UsageStore()
    t1, t2 = T0, T0 + 15.0
    usage.apply_rows(
        "n1",
        scrape(
            {
                ("ns", "web-a"): containers(("app", 10.0, t1, 2**27), ("proxy", 1.0, t1, 2**20)),
                ("ns", "web-b"): containers(("app", 5.0, t1 - 5.038, 1000.0)),
                ("other", "db"): containers(("db", 100.0, t1, 3 * 2**30)),
            },
            (1000.0, t1, 4 * 2**30),
        ),
        t1,
    )
    usage.apply_rows(
        "n1",
        scrape(
            {
                # 0.15 core and 0.0015 core over 15 s
                ("ns", "web-a"): containers(
                    ("app", 12.25, t2, 2**28), ("proxy", 1.0225, t2, 2**21)
                ),
                ("ns", "web-b"): containers(("app", 6.0, t2, 1000.0)),
                ("other", "db"): containers(("db", 130.0, t2, 3 * 2**30)),
                ("ns", "young"): containers(("app", 0.5, t2, 10.0)),
            },
            (1030.0, t2, 4 * 2**30 + 512),
        ),
        t2,
    )
    usage.apply_rows("n2", scrape({}, (1.0, t1, 2**30)), t1)
    usage.apply_rows("n2", scrape({}, (61.0, t1 + 60.0, 2**30)), t1 + 60.0)
    usage.apply_rows("n3", scrape({}, (1.0, t1, 2**30)), t1)
    return usage


def api() -> ResourceMetricsApi:
    return ResourceMetricsApi(cluster(), store(), clock=lambda: NOW)


def get(path: str, query: str = "", accept: str = "") -> bytes:
    request = parse_request(path, parse_query(query), query)
    assert request is not None
    chosen = negotiate(accept)
    assert not isinstance(chosen, NotAcceptable)
    return api().render(request, chosen[0])


# --- formatting -----------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=10**16))
def test_nanocores_are_the_canonical_scaled_quantity(nanocores: int) -> None:
    assert nanocores_quantity(nanocores) == format_quantity(Decimal(nanocores).scaleb(-9))


@pytest.mark.parametrize(
    ("nanocores", "text"),
    [
        (0, "0"),
        (12_345_678, "12345678n"),
        (1_500_000, "1500u"),
        (3_000_000, "3m"),
        (2 * 10**9, "2"),
    ],
)
def test_nanocore_vectors(nanocores: int, text: str) -> None:
    assert nanocores_quantity(nanocores) == text


def test_memory_quantities_match_what_metrics_server_printed_for_the_kubelet_samples() -> None:
    decoded = json.loads((SAMPLES / "decoded.json").read_text())
    checked = 0
    for sample in decoded["samples"]:
        result = sample["decoded_by_real_metrics_server"]
        quantities = result.get("memory_quantities_via_uint64Quantity_BinarySI") or {}
        values: dict[str, int] = {}
        for name, node in (result.get("batch") or {}).get("nodes", {}).items():
            values[f"node/{name}"] = node["memory_usage_bytes"]
        for entry in (result.get("batch") or {}).get("pods", []):
            for name, point in entry["containers"].items():
                key = f"container/{entry['namespace']}/{entry['name']}/{name}"
                values[key] = point["memory_usage_bytes"]
        for key, text in quantities.items():
            assert format_quantity(values[key], Format.BINARY_SI) == text, key
            checked += 1
    assert checked >= 10


# --- usage per container from the store -------------------------------------------------------


def test_pod_usage_per_container_is_metrics_servers_resource_usage() -> None:
    usage = store().pod_resource_usage("ns", "web-a")
    assert usage == ResourceUsage(
        timestamp=T0 + 15.0,
        window_ns=15_000_000_000,
        containers=(
            ContainerResourceUsage("app", 150_000_000, 2**28),
            ContainerResourceUsage("proxy", 1_500_000, 2**21),
        ),
        nanocores=151_500_000,
        memory_bytes=2**28 + 2**21,
    )


def test_two_samples_of_every_container_are_needed() -> None:
    usage = store()
    assert usage.pod_resource_usage("ns", "young") is None
    assert usage.pod_resource_usage("ns", "missing") is None
    assert usage.node_resource_usage("n3") is None
    node = usage.node_resource_usage("n1")
    assert node is not None
    assert (node.nanocores, node.memory_bytes, node.window_ns) == (
        2 * 10**9,
        4 * 2**30 + 512,
        15 * 10**9,
    )


def test_a_container_whose_counter_went_back_is_left_out() -> None:
    usage = UsageStore()
    usage.apply_rows(
        "n",
        scrape({("ns", "p"): containers(("a", 5.0, T0, 1.0), ("b", 9.0, T0, 1.0))}, (1.0, T0, 1.0)),
        T0,
    )
    usage.apply_rows(
        "n",
        scrape(
            {("ns", "p"): containers(("a", 6.0, T0 + 10, 2.0), ("b", 1.0, T0 + 10, 2.0))},
            (2.0, T0 + 10, 1.0),
        ),
        T0 + 10,
    )
    found = usage.pod_resource_usage("ns", "p")
    assert found is not None
    assert [c.name for c in found.containers] == ["a"]
    assert found.containers[0].nanocores == 100_000_000


# --- documents ----------------------------------------------------------------------------------


def test_pod_metrics_get_is_byte_compatible() -> None:
    assert get(f"{V}/namespaces/ns/pods/web-a") == (
        b'{"kind":"PodMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"web-a",'
        b'"namespace":"ns","creationTimestamp":"2023-11-14T22:15:00Z","labels":{"app":"web",'
        b'"tier":"front"}},"timestamp":"2023-11-14T22:13:35Z","window":"15s","containers":['
        b'{"name":"app","usage":{"cpu":"150m","memory":"256Mi"}},'
        b'{"name":"proxy","usage":{"cpu":"1500u","memory":"2Mi"}}]}\n'
    )


def test_pod_list_all_namespaces_is_sorted_and_skips_pods_without_usage() -> None:
    body = json.loads(get(f"{V}/pods"))
    assert body["kind"] == "PodMetricsList"
    assert body["metadata"] == {}
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]] == [
        ("ns", "web-a"),
        ("ns", "web-b"),
        ("other", "db"),
    ]
    assert all("kind" not in item for item in body["items"])
    web_b = body["items"][1]
    assert web_b["window"] == "20.038s"  # from the scrape pair, not the interval
    assert web_b["timestamp"] == "2023-11-14T22:13:35Z"
    assert web_b["containers"] == [{"name": "app", "usage": {"cpu": "49905180n", "memory": "1k"}}]


@pytest.mark.parametrize(
    ("path", "query", "names"),
    [
        (f"{V}/namespaces/ns/pods", "", ["web-a", "web-b"]),
        (f"{V}/namespaces/other/pods", "", ["db"]),
        (f"{V}/pods", "labelSelector=app%3Dweb", ["web-a", "web-b"]),
        (f"{V}/pods", "labelSelector=tier", ["web-a"]),
        (f"{V}/pods", "fieldSelector=metadata.name%3Ddb", ["db"]),
        (f"{V}/pods", "fieldSelector=metadata.namespace%21%3Dother", ["web-a", "web-b"]),
        (f"{V}/namespaces/ns/pods", "fieldSelector=metadata.name%3Ddb", []),
        (f"{V}/nodes", "", ["n1", "n2"]),
        (f"{V}/nodes", "labelSelector=zone%3Db", ["n2"]),
        (f"{V}/nodes", "fieldSelector=metadata.name%3Dn1", ["n1"]),
        # Nodes carry no namespace field: it reads as "".
        (f"{V}/nodes", "fieldSelector=metadata.namespace%3Dx", []),
        (f"{V}/nodes", "fieldSelector=metadata.namespace%21%3Dx", ["n1", "n2"]),
    ],
)
def test_lists_filter_by_namespace_labels_and_fields(
    path: str, query: str, names: list[str]
) -> None:
    body = json.loads(get(path, query))
    assert [item["metadata"]["name"] for item in body["items"]] == names


def test_node_metrics_get_is_byte_compatible() -> None:
    assert get(f"{V}/nodes/n2") == (
        b'{"kind":"NodeMetrics","apiVersion":"metrics.k8s.io/v1beta1","metadata":{"name":"n2",'
        b'"creationTimestamp":"2023-11-14T22:15:00Z","labels":{"zone":"b"}},'
        b'"timestamp":"2023-11-14T22:14:20Z","window":"1m0s","usage":{"cpu":"1","memory":"1Gi"}}\n'
    )


@pytest.mark.parametrize(
    ("path", "message", "details"),
    [
        (f"{V}/namespaces/ns/pods/nope", 'pods "nope" not found', {"name": "nope", "kind": "pods"}),
        (f"{V}/namespaces/ns/pods/done", 'pods "done" not found', {"name": "done", "kind": "pods"}),
        (
            f"{V}/namespaces/ns/pods/young",
            'podmetrics.metrics.k8s.io "ns/young" not found',
            {"name": "ns/young", "group": "metrics.k8s.io", "kind": "podmetrics"},
        ),
        (f"{V}/nodes/nope", 'node "nope" not found', {"name": "nope", "kind": "node"}),
        (
            f"{V}/nodes/n3",
            'nodemetrics.metrics.k8s.io "n3" not found',
            {"name": "n3", "group": "metrics.k8s.io", "kind": "nodemetrics"},
        ),
    ],
)
def test_not_found_uses_metrics_servers_wording(
    path: str, message: str, details: dict[str, str]
) -> None:
    with pytest.raises(NotFound) as caught:
        get(path)
    assert caught.value.message == message
    assert caught.value.details == details


@pytest.mark.parametrize(
    ("path", "query", "error", "message"),
    [
        (
            f"{V}/pods",
            "fieldSelector=spec.nodeName%3Dn1",
            BadRequest,
            '"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        (f"{V}/pods", "labelSelector=%21%21", BadRequest, ""),
        (
            f"{V}/pods",
            "watch=true",
            MethodNotAllowed,
            'watch is not supported on resources of kind "pods.metrics.k8s.io"',
        ),
        (f"{V}/pods/web-a", "", NotFound, "the server could not find the requested resource"),
        (f"{V}/nodes/a%b", "", BadRequest, "invalid resource name \"a%b\": [may not contain '%']"),
        (
            f"{V}/namespaces/../pods",
            "",
            BadRequest,
            "invalid namespace name \"..\": [may not be '..']",
        ),
        (
            f"{V}/namespaces/ns/nodes",
            "",
            NotFound,
            "the server could not find the requested resource",
        ),
        (f"{V}/nodes/n1/status", "", NotFound, "the server could not find the requested resource"),
    ],
)
def test_bad_requests_are_statuses(
    path: str, query: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        parse_request(path, parse_query(query), query)
    assert message in str(caught.value)


def test_unknown_versions_are_plain_404s_and_discovery_documents() -> None:
    for unserved in ("v1alpha1", "v2", "v1beta2", "V1"):
        assert parse_request(f"/apis/metrics.k8s.io/{unserved}", parse_query("")) is None
    assert parse_request("/apis/metrics.k8s.io/v1", parse_query("")) is not None
    v1 = {"groupVersion": "metrics.k8s.io/v1", "version": "v1"}
    assert json.loads(get("/apis/metrics.k8s.io")) == {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": "metrics.k8s.io",
        "versions": [v1, {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
        "preferredVersion": v1,
    }
    resources = json.loads(get(V))["resources"]
    assert [(r["name"], r["namespaced"], r["kind"], r["verbs"]) for r in resources] == [
        ("nodes", False, "NodeMetrics", ["get", "list"]),
        ("pods", True, "PodMetrics", ["get", "list"]),
    ]


def test_document_is_the_json_shaped_structure_the_body_encodes() -> None:
    metrics = api()
    request = MetricsApiRequest("pods", "ns", None)
    document = metrics.document(request)
    assert isinstance(document, dict)
    assert json.loads(metrics.render(request)) == document


@pytest.mark.parametrize("seed", range(8))
def test_memoised_pod_items_equal_a_fresh_api_s_through_scrapes(seed: int) -> None:
    """The rendered parts of pod items (`ResourceMetricsApi._pod_parts`, kept while the store
    returns the same usage object and the record the same labels) against an API that never
    rendered before, through random scrapes and relabels, every list and object asked."""
    rng = random.Random(seed)
    state, usage = cluster(), store()
    metrics = ResourceMetricsApi(state, usage, clock=lambda: NOW)
    names = ["web-a", "web-b", "young"]
    at = T0 + 15.0
    cpu = dict.fromkeys(names, 20.0)
    for _ in range(30):
        roll = rng.random()
        if roll < 0.5:  # n1 scraped again: some pods used more
            at += 15.0
            for name in rng.sample(names, rng.randint(1, len(names))):
                cpu[name] += rng.random()
            usage.apply_rows(
                "n1",
                scrape(
                    {("ns", n): containers(("app", cpu[n], at, 2**20 * cpu[n])) for n in names},
                    (2000.0 + at - T0, at, 4 * 2**30),
                ),
                at,
            )
        elif roll < 0.8:  # a watch event: new labels
            name = rng.choice(names)
            state.apply(PODS, pod(name, app="web", turn=str(rng.randint(0, 3))))
        fresh = ResourceMetricsApi(state, usage, clock=lambda: NOW)
        for request in (
            MetricsApiRequest("pods", "ns", None),
            MetricsApiRequest("pods", None, None),
            MetricsApiRequest("pods", "ns", rng.choice(names)),
        ):
            assert outcome(metrics, request) == outcome(fresh, request), request


def outcome(metrics: ResourceMetricsApi, request: MetricsApiRequest) -> object:
    try:
        return metrics.document(request)
    except StatusError as err:  # a pod without usage yet: the same 404
        return (err.code, err.message)


# --- Table ----------------------------------------------------------------------------------------

TABLE_V1 = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def test_pod_table_has_metrics_servers_columns_and_summed_cells() -> None:
    table = json.loads(get(f"{V}/namespaces/ns/pods", accept=TABLE_V1))
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["columnDefinitions"] == [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name of the resource",
            "priority": 0,
        },
        {"name": "cpu", "type": "string", "format": "quantity", "description": "", "priority": 0},
        {
            "name": "memory",
            "type": "string",
            "format": "quantity",
            "description": "",
            "priority": 0,
        },
        {
            "name": "Window",
            "type": "string",
            "format": "duration",
            "description": "",
            "priority": 0,
        },
    ]
    assert [row["cells"] for row in table["rows"]] == [
        ["web-a", "151500u", "258Mi", "15s"],
        ["web-b", "49905180n", "1k", "20.038s"],
    ]
    assert table["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            "name": "web-a",
            "namespace": "ns",
            "creationTimestamp": "2023-11-14T22:15:00Z",
            "labels": {"app": "web", "tier": "front"},
        },
    }


def test_table_variants() -> None:
    v1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io"
    node = json.loads(get(f"{V}/nodes/n1", accept=v1beta1))
    assert node["apiVersion"] == "meta.k8s.io/v1beta1"
    assert [row["cells"] for row in node["rows"]] == [["n1", "2", "4294967808", "15s"]]
    full = json.loads(get(f"{V}/nodes", "includeObject=Object", accept=TABLE_V1))
    assert full["rows"][0]["object"]["kind"] == "NodeMetrics"
    bare = json.loads(get(f"{V}/nodes", "includeObject=None", accept=TABLE_V1))
    assert bare["rows"][0]["object"] is None
    empty = json.loads(get(f"{V}/pods", "labelSelector=app%3Dnone", accept=TABLE_V1))
    assert (empty["columnDefinitions"], empty["rows"]) == (None, None)


@pytest.mark.parametrize(
    ("accept", "view"),
    [
        ("", "json"),
        ("application/vnd.kubernetes.protobuf, */*", "protobuf"),  # what the HPA sends
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", "v1"),
        ("application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io,application/json", "json"),
    ],
)
def test_negotiation(accept: str, view: str) -> None:
    chosen = negotiate(accept)
    assert not isinstance(chosen, NotAcceptable)
    assert chosen[0] == view


def test_protobuf_is_a_view_and_unknown_conversions_are_406() -> None:
    assert negotiate("application/vnd.kubernetes.protobuf") == ("protobuf", False)
    # q first, then the more specific type, then the first written (negotiation's rules)
    assert negotiate("*/*, application/vnd.kubernetes.protobuf")[0] == "protobuf"  # type: ignore[index]
    table_low = (
        "application/json;as=Table;g=meta.k8s.io;v=v1;q=0.5, application/vnd.kubernetes.protobuf"
    )
    assert negotiate(table_low)[0] == "protobuf"  # type: ignore[index]
    protobuf_table = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1"
    assert negotiate(f"{protobuf_table}, application/json;as=Table;g=meta.k8s.io;v=v1")[0] == "v1"  # type: ignore[index]
    assert isinstance(negotiate(protobuf_table), NotAcceptable)
    assert isinstance(negotiate("application/json;as=Table;v=v2;g=meta.k8s.io"), NotAcceptable)
    refused = negotiate("application/yaml")
    assert isinstance(refused, NotAcceptable)
    assert "application/vnd.kubernetes.protobuf" in refused.message


# --- through the app ------------------------------------------------------------------------------


def app(*, enabled: bool = True) -> Any:
    state = cluster()
    settings = AppSettings(
        metrics_api=ResourceMetricsApi(state, store(), clock=lambda: NOW) if enabled else None,
        demo_core_api=DemoCoreApi(
            {"nodes": [{"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}]}
        )
        if enabled
        else None,
    )
    return create_app(cluster=state, backends=[], settings=settings)


async def test_root_discovery_lists_the_group_only_when_enabled() -> None:
    on = await call(app(), scope_for("GET", b"/apis"))
    off = await call(app(enabled=False), scope_for("GET", b"/apis"))
    assert "metrics.k8s.io" in [g["name"] for g in json.loads(on.body)["groups"]]
    assert "metrics.k8s.io" not in [g["name"] for g in json.loads(off.body)["groups"]]
    disabled = await call(app(enabled=False), scope_for("GET", f"{V}/pods".encode()))
    assert disabled.status == 404
    core_off = await call(app(enabled=False), scope_for("GET", b"/api/v1/nodes"))
    assert core_off.status == 404


async def test_the_app_serves_lists_tables_and_statuses() -> None:
    served = app()
    listed = await call(served, scope_for("GET", f"{V}/namespaces/ns/pods".encode()))
    assert listed.status == 200
    assert listed.headers["content-type"] == "application/json"
    assert len(json.loads(listed.body)["items"]) == 2
    missing = await call(served, scope_for("GET", f"{V}/nodes/nope".encode()))
    assert missing.status == 404
    assert json.loads(missing.body)["reason"] == "NotFound"
    posted = await call(served, scope_for("POST", f"{V}/nodes".encode()))
    assert posted.status == 405
    refused = await call(
        served,
        scope_for("GET", f"{V}/nodes".encode(), headers=[(b"accept", b"application/yaml")]),
    )
    assert refused.status == 406
    table = await call(
        served, scope_for("GET", f"{V}/nodes".encode(), headers=[(b"accept", TABLE_V1.encode())])
    )
    assert json.loads(table.body)["kind"] == "Table"


async def test_the_demo_core_subset_serves_nodes_for_kubectl_top() -> None:
    served = app()
    versions = json.loads((await call(served, scope_for("GET", b"/api"))).body)
    assert versions["kind"] == "APIVersions"
    nodes = json.loads((await call(served, scope_for("GET", b"/api/v1/nodes"))).body)
    assert nodes["kind"] == "NodeList"
    assert nodes["items"][0]["status"]["allocatable"] == {"cpu": "4"}
    node = json.loads((await call(served, scope_for("GET", b"/api/v1/nodes/n1"))).body)
    assert (node["kind"], node["apiVersion"]) == ("Node", "v1")
    missing = await call(served, scope_for("GET", b"/api/v1/namespaces/ns/pods/x"))
    assert missing.status == 404
    assert json.loads(missing.body)["message"] == 'pods "x" not found'
    other = await call(served, scope_for("GET", b"/api/v1/secrets"))
    assert other.status == 404


# --- authorization attributes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "query", "verb", "namespace", "resource", "name"),
    [
        (f"{V}/pods", "", "list", "", "pods", ""),
        (f"{V}/namespaces/ns/pods", "labelSelector=app%3Dweb", "list", "ns", "pods", ""),
        (f"{V}/namespaces/ns/pods/web-a", "", "get", "ns", "pods", "web-a"),
        (f"{V}/nodes", "", "list", "", "nodes", ""),
        (f"{V}/nodes/n1", "", "get", "", "nodes", "n1"),
    ],
)
def test_requests_are_authorized_as_metrics_server_requests(
    path: str, query: str, verb: str, namespace: str, resource: str, name: str
) -> None:
    attributes = request_attributes("GET", path, query.encode())
    assert attributes.resource_request
    assert (attributes.group, attributes.version) == ("metrics.k8s.io", "v1beta1")
    assert (attributes.verb, attributes.namespace, attributes.resource, attributes.name) == (
        verb,
        namespace,
        resource,
        name,
    )
    if query:
        assert attributes.label_requirements[0].key == "app"


# --- OpenAPI ----------------------------------------------------------------------------------------


def test_responses_validate_against_the_openapi_models() -> None:
    schemas.PodMetricsList.model_validate_json(get(f"{V}/pods"))
    schemas.PodMetrics.model_validate_json(get(f"{V}/namespaces/ns/pods/web-a"))
    schemas.NodeMetricsList.model_validate_json(get(f"{V}/nodes"))
    schemas.NodeMetrics.model_validate_json(get(f"{V}/nodes/n1"))
    schemas.APIResourceList.model_validate_json(get(V))


async def test_openapi_describes_the_group_only_when_it_is_served() -> None:
    on = json.loads((await call(app(), scope_for("GET", b"/openapi/v3"))).body)
    off = json.loads((await call(app(enabled=False), scope_for("GET", b"/openapi/v3"))).body)
    assert "apis/metrics.k8s.io/v1beta1" in on["paths"]
    assert "apis/metrics.k8s.io/v1beta1" not in off["paths"]
    v2 = json.loads((await call(app(), scope_for("GET", b"/openapi/v2"))).body)
    assert f"{V}/namespaces/{{namespace}}/pods/{{name}}" in v2["paths"]
    assert "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics" in v2["definitions"]
    v2_off = json.loads((await call(app(enabled=False), scope_for("GET", b"/openapi/v2"))).body)
    assert not [path for path in v2_off["paths"] if "/metrics.k8s.io/" in path]


def test_memoised_usage_and_items_follow_new_scrapes_and_labels() -> None:
    state = cluster()
    usage = store()
    metrics = ResourceMetricsApi(state, usage, clock=lambda: NOW)
    first = metrics.pod_metrics("other", "db")
    assert usage.pod_resource_usage("other", "db") is usage.pod_resource_usage("other", "db")
    assert first["containers"][0]["usage"]["cpu"] == "2"  # 30 core-seconds over 15 s
    t3 = T0 + 30.0
    usage.apply_rows(
        "n1",
        scrape(
            {
                ("ns", "web-a"): containers(("app", 13.0, t3, 1.0), ("proxy", 1.1, t3, 1.0)),
                ("other", "db"): containers(("db", 145.0, t3, 2**30)),
            },
            (1060.0, t3, 1.0),
        ),
        t3,
    )
    second = metrics.pod_metrics("other", "db")
    assert second["containers"][0]["usage"] == {"cpu": "1", "memory": "1Gi"}
    assert second["timestamp"] == "2023-11-14T22:13:50Z"
    state.apply(PODS, pod("db", "other", app="db", tier="data"))
    third = metrics.pod_metrics("other", "db")
    assert third["metadata"]["labels"] == {"app": "db", "tier": "data"}
    # web-b was not in the last scrape: gone from the node, gone from the API.
    with pytest.raises(NotFound):
        metrics.pod_metrics("ns", "web-b")


@pytest.mark.parametrize(
    "path",
    [
        f"{V}/namespaces/ns/pods",
        f"{V}/pods",
        f"{V}/namespaces/ns/pods/web-a",
        f"{V}/nodes",
        f"{V}/nodes/n1",
    ],
)
@pytest.mark.parametrize(
    "accept", ["application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf, */*"]
)
async def test_protobuf_answers_decode_to_the_json_values(path: str, accept: str) -> None:
    served = app()
    as_json = await call(served, scope_for("GET", path.encode()))
    as_protobuf = await call(
        served, scope_for("GET", path.encode(), headers=[(b"accept", accept.encode())])
    )
    assert as_json.status == as_protobuf.status == 200
    assert as_protobuf.headers["content-type"] == "application/vnd.kubernetes.protobuf"
    kubeproto.same_values(json.loads(as_json.body), as_protobuf.body)


async def test_protobuf_errors_and_tables() -> None:
    served = app()
    protobuf_accept = [(b"accept", b"application/vnd.kubernetes.protobuf")]
    missing = await call(
        served, scope_for("GET", f"{V}/nodes/nope".encode(), headers=protobuf_accept)
    )
    assert missing.status == 404
    assert missing.headers["content-type"] == "application/vnd.kubernetes.protobuf"
    assert kubeproto.decode(missing.body)[1] == "Status"
    # A Table clause keeps its JSON Table even when protobuf is acceptable too.
    table = await call(
        served,
        scope_for(
            "GET",
            f"{V}/nodes".encode(),
            headers=[
                (b"accept", f"{TABLE_V1}, application/vnd.kubernetes.protobuf;q=0.5".encode())
            ],
        ),
    )
    assert json.loads(table.body)["kind"] == "Table"
