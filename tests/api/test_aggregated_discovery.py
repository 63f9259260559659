"""Aggregated discovery (KEP-3352, `apidiscovery.k8s.io/v2`) at `/apis`, in process through
ASGI: the document is what kube-aggregator would build from our per-version lists, in JSON and
protobuf (decoded by the independent decoder built from upstream's apidiscovery/v2 `.proto`),
with upstream's headers, `ETag` and 304, rendered once per served state; plain clients get the
plain documents, and an `Accept` we cannot honour gets what kube-apiserver answers.

The real server with the real kubectl (one discovery request) is
tests/integration/test_kubectl_discovery.py; the real aggregator merging our discovery,
tests/controlplane/test_aggregation.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.api import aggregated_discovery, discovery, wire
from custom_metrics_server.api.core_api import DemoCoreApi
from custom_metrics_server.api.negotiation import NotAcceptable, negotiate_discovery
from custom_metrics_server.backends.memory import MemoryBackend, SnapshotBuilder
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi
from custom_metrics_server.query.engine import QueryEngine
from custom_metrics_server.server.app import AppSettings, Server, create_app
from custom_metrics_server.server.discovery import ServedDiscovery
from tests import kubeproto
from tests.asgi import Reply, call, scope_for
from tests.conftest import contract_app
from tests.metrics_api.test_responses import NOW, cluster, store

V2 = "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
PROTOBUF = "application/vnd.kubernetes.protobuf"
#: What client-go 1.37 (kubectl) sends for /api and /apis.
KUBECTL = f"application/json;{V2},application/json"
#: What kube-aggregator 1.37 sends to an aggregated server's /apis (v2 only).
AGGREGATOR = f"application/json;{V2}"
ETAG = re.compile(r'"[0-9A-F]{128}"')


def full_app(backend: MemoryBackend | None = None) -> Server:
    """The contract fixture's custom and external metrics, plus metrics.k8s.io."""
    contract = contract_app()
    backends = [backend] if backend is not None else list(contract.engine.backends)
    metrics = ResourceMetricsApi(cluster(), store(), clock=lambda: NOW)
    return create_app(
        cluster=contract.engine.cluster,
        backends=backends,
        settings=AppSettings(metrics_api=metrics),
    )


async def get(app: Any, path: str, accept: str | None, **headers: str) -> Reply:
    sent = [(b"accept", accept.encode())] if accept is not None else []
    sent += [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]
    query = b""
    if "?" in path:
        path, _, raw = path.partition("?")
        query = raw.encode()
    return await call(app, scope_for("GET", path.encode(), query, sent))


# --- the conversion ---------------------------------------------------------------------------


def entry(name: str, kind: str = "", *, namespaced: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": extra.pop("singularName", ""),
        "namespaced": namespaced,
        "kind": kind,
        "verbs": extra.pop("verbs", ["get"]),
        **extra,
    }


def test_a_plain_list_converts_as_upstream_converts_it() -> None:
    """`ConvertGroupVersionIntoToDiscovery`: resources first in list order, then parents a
    subresource names; a parent the list lacks gets an empty responseKind and no verbs."""
    converted = aggregated_discovery.version_resources(
        [
            entry("pods/http_requests", "MetricValueList"),
            entry("nodes", "NodeMetrics", namespaced=False, verbs=["get", "list"]),
            entry("nodes/status", "NodeMetrics", namespaced=False),
            entry("ingresses.networking.k8s.io/hits", "MetricValueList"),
            entry("pods/cpu", "MetricValueList"),
            entry("widgets", "Widget", singularName="widget", shortNames=["w"], categories=["all"]),
        ]
    )
    empty = {"group": "", "version": "", "kind": ""}
    assert converted == [
        {
            "resource": "nodes",
            "responseKind": {"group": "", "version": "", "kind": "NodeMetrics"},
            "scope": "Cluster",
            "singularResource": "",
            "verbs": ["get", "list"],
            "subresources": [
                {
                    "subresource": "status",
                    "responseKind": {"group": "", "version": "", "kind": "NodeMetrics"},
                    "verbs": ["get"],
                }
            ],
        },
        {
            "resource": "widgets",
            "responseKind": {"group": "", "version": "", "kind": "Widget"},
            "scope": "Namespaced",
            "singularResource": "widget",
            "verbs": ["get"],
            "shortNames": ["w"],
            "categories": ["all"],
        },
        {
            "resource": "pods",
            "responseKind": empty,
            "scope": "Namespaced",
            "singularResource": "",
            "verbs": None,
            "subresources": [
                {
                    "subresource": "http_requests",
                    "responseKind": {"group": "", "version": "", "kind": "MetricValueList"},
                    "verbs": ["get"],
                },
                {
                    "subresource": "cpu",
                    "responseKind": {"group": "", "version": "", "kind": "MetricValueList"},
                    "verbs": ["get"],
                },
            ],
        },
        {
            "resource": "ingresses.networking.k8s.io",
            "responseKind": empty,
            "scope": "Namespaced",
            "singularResource": "",
            "verbs": None,
            "subresources": [
                {
                    "subresource": "hits",
                    "responseKind": {"group": "", "version": "", "kind": "MetricValueList"},
                    "verbs": ["get"],
                }
            ],
        },
    ]


def test_upstreams_placeholder_and_a_scope_mismatch() -> None:
    placeholder = discovery.custom_resource_list("custom.metrics.k8s.io", "v1beta2", [])
    (parent,) = aggregated_discovery.version_resources(placeholder["resources"])
    assert (parent["resource"], parent["scope"], parent["subresources"][0]["subresource"]) == (
        "",
        "Cluster",
        "custommetrics",
    )
    with pytest.raises(ValueError, match="scope do not match"):
        aggregated_discovery.version_resources(
            [entry("pods/a", "X"), entry("pods/b", "X", namespaced=False)]
        )
    document = aggregated_discovery.group_discovery_list(
        {
            "g": [
                (
                    "v1",
                    {"resources": [entry("pods/a", "X"), entry("pods/b", "X", namespaced=False)]},
                )
            ]
        }
    )
    # As kube-aggregator publishes a peer it could not convert: the version, no resources.
    assert document["items"][0]["versions"] == [{"version": "v1", "freshness": "Stale"}]


# --- the served document -----------------------------------------------------------------------


def client_go_lists(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """client-go's `SplitGroupsAndResources`: the APIResourceList of every group version, as
    kubectl sees them (`convertAPIResource`, `convertAPISubresource`); written from upstream's
    discovery_client.go, independently of the server's conversion."""
    lists: dict[str, list[dict[str, Any]]] = {}
    for group in document["items"]:
        name = group["metadata"].get("name", "")
        for version in group.get("versions", []):
            resources: list[dict[str, Any]] = []
            for resource in version.get("resources", []):
                parent = {
                    "name": resource["resource"],
                    "singularName": resource["singularResource"],
                    "namespaced": resource["scope"] == "Namespaced",
                    "kind": resource["responseKind"]["kind"],
                    "verbs": resource["verbs"],
                }
                resources.append(parent)
                resources.extend(
                    {
                        "name": f"{parent['name']}/{sub['subresource']}",
                        "singularName": parent["singularName"],
                        "namespaced": parent["namespaced"],
                        "kind": sub["responseKind"]["kind"],
                        "verbs": sub["verbs"],
                    }
                    for sub in resource.get("subresources", [])
                )
            gv = f"{name}/{version['version']}" if name else version["version"]
            lists[gv] = resources
    return lists


async def test_kubectl_reads_back_every_plain_list_in_one_document() -> None:
    app = full_app()
    reply = await get(app, "/apis", KUBECTL)
    assert reply.status == 200
    document = json.loads(reply.body)
    assert (document["kind"], document["apiVersion"]) == (
        "APIGroupDiscoveryList",
        "apidiscovery.k8s.io/v2",
    )
    plain_root = json.loads((await get(app, "/apis", "application/json")).body)
    served = {
        group["name"]: [v["version"] for v in group["versions"]] for group in plain_root["groups"]
    }
    lists = client_go_lists(document)
    assert set(lists) == {f"{g}/{v}" for g, versions in served.items() for v in versions}
    for gv, resources in lists.items():
        plain = json.loads((await get(app, f"/apis/{gv}", "application/json")).body)
        # The parents client-go adds (no verbs) are exactly the parents the plain list names
        # only through its `parent/metric` entries; everything else is the plain list.
        with_verbs = [r for r in resources if r["verbs"]]
        assert sorted(with_verbs, key=lambda r: r["name"]) == sorted(
            plain["resources"], key=lambda r: r["name"]
        ), gv
        added = {r["name"] for r in resources if not r["verbs"]}
        named = {r["name"].split("/")[0] for r in plain["resources"] if "/" in r["name"]}
        assert added == named - {r["name"] for r in plain["resources"]}, gv
    assert "pods/some-metric" in {r["name"] for r in lists["custom.metrics.k8s.io/v1beta2"]}
    assert [r["name"] for r in lists["metrics.k8s.io/v1"]] == ["nodes", "pods"]


async def test_groups_versions_and_freshness_follow_upstream() -> None:
    document = json.loads((await get(full_app(), "/apis", KUBECTL)).body)
    names = [group["metadata"]["name"] for group in document["items"]]
    # Default priorities (a server of its own): groups by name, versions preferred first.
    assert (
        names
        == sorted(names)
        == [
            "custom-metrics",
            "custom.metrics.k8s.io",
            "external.metrics.k8s.io",
            "metrics.k8s.io",
        ]
    )
    versions = {
        group["metadata"]["name"]: [v["version"] for v in group["versions"]]
        for group in document["items"]
    }
    assert versions == {
        "custom-metrics": ["v1alpha1"],
        "custom.metrics.k8s.io": ["v1beta2", "v1beta1"],
        "external.metrics.k8s.io": ["v1beta1"],
        "metrics.k8s.io": ["v1", "v1beta1"],
    }
    for group in document["items"]:
        assert group["metadata"] == {"name": group["metadata"]["name"], "creationTimestamp": None}
        assert {v["freshness"] for v in group["versions"]} == {"Current"}
    # Go field order: kind, apiVersion, metadata, items; scope and verbs on every resource.
    assert list(document) == ["kind", "apiVersion", "metadata", "items"]
    metrics = document["items"][3]["versions"][0]["resources"]
    assert [list(r) for r in metrics] == [
        ["resource", "responseKind", "scope", "singularResource", "verbs"]
    ] * 2
    assert [(r["resource"], r["scope"], r["verbs"]) for r in metrics] == [
        ("nodes", "Cluster", ["get", "list"]),
        ("pods", "Namespaced", ["get", "list"]),
    ]


async def test_protobuf_and_json_are_the_same_document() -> None:
    app = full_app()
    as_json = await get(app, "/apis", KUBECTL)
    as_protobuf = await get(app, "/apis", f"{PROTOBUF};{V2},{KUBECTL}")
    assert as_protobuf.headers["content-type"] == f"{PROTOBUF};{V2}"
    decoded = kubeproto.same_values(json.loads(as_json.body), as_protobuf.body)
    _, _, message, _ = kubeproto.decode(as_protobuf.body)
    assert message.DESCRIPTOR.full_name == "k8s.io.api.apidiscovery.v2.APIGroupDiscoveryList"
    assert len(decoded["items"]) == 4


async def test_headers_etag_and_304_are_upstreams() -> None:
    app = full_app()
    reply = await get(app, "/apis", AGGREGATOR)
    etag = reply.headers["etag"]
    assert ETAG.fullmatch(etag)
    assert reply.headers["content-type"] == f"application/json;{V2}"
    assert (reply.headers["vary"], reply.headers["cache-control"]) == ("Accept", "public")
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert int(reply.headers["content-length"]) == len(reply.body)
    # The SHA-512 of the list without kind/apiVersion, as calculateETag hashes json.Marshal.
    listed = {k: v for k, v in json.loads(reply.body).items() if k not in ("kind", "apiVersion")}
    digest = hashlib.sha512(wire.dumps(listed).rstrip(b"\n")).hexdigest().upper()
    assert etag == f'"{digest}"'
    protobuf = await get(app, "/apis", f"{PROTOBUF};{V2}")
    assert protobuf.headers["etag"] == etag  # one ETag, Vary: Accept tells them apart
    for accept in (AGGREGATOR, f"{PROTOBUF};{V2}"):
        again = await get(app, "/apis", accept, if_none_match=etag)
        assert again.status == 304
        assert again.body == b""
        assert "content-length" not in again.headers
        assert (again.headers["etag"], again.headers["vary"]) == (etag, "Accept")
        assert again.headers["cache-control"] == "public"
    for stale in ('"0"', f"W/{etag}", etag.strip('"'), f"{etag}, {etag}"):
        assert (await get(app, "/apis", AGGREGATOR, if_none_match=stale)).status == 200
    # The plain list has neither an ETag nor a 304.
    plain = await get(app, "/apis", "application/json", if_none_match=etag)
    assert plain.status == 200
    assert "etag" not in plain.headers


async def test_the_document_follows_the_served_state_and_is_rendered_once_per_state() -> None:
    contract = contract_app()
    backend = MemoryBackend("m")
    builder = SnapshotBuilder(contract.engine.cluster, timestamp=time.time())
    builder.declare("pods", "first")
    backend.publish(builder.build())
    app = full_app(backend)
    first = await get(app, "/apis", AGGREGATOR)
    assert "first" in first.body.decode()
    engine = QueryEngine(cluster=contract.engine.cluster, backends=[backend])
    served = ServedDiscovery(engine)
    assert served.aggregated() is served.aggregated()  # cached: the same rendered bodies
    cached = served.aggregated()
    builder.declare("pods", "second")
    backend.publish(builder.build())
    assert served.aggregated() is not cached
    second = await get(app, "/apis", AGGREGATOR, if_none_match=first.headers["etag"])
    assert second.status == 200
    assert second.headers["etag"] != first.headers["etag"]
    lists = client_go_lists(json.loads(second.body))
    assert {"pods/first", "pods/second"} <= {
        r["name"] for r in lists["custom.metrics.k8s.io/v1beta1"]
    }


async def test_plain_clients_get_the_plain_documents_unchanged() -> None:
    app = full_app()
    for accept in (None, "application/json", "*/*", "application/json, */*"):
        reply = await get(app, "/apis", accept)
        assert reply.headers["content-type"] == "application/json"
        extra = {"metrics.k8s.io": ("v1", "v1beta1")}
        assert reply.body == wire.dumps(discovery.api_group_list("127.0.0.1:6443", extra))
    group = await get(app, "/apis/custom.metrics.k8s.io", KUBECTL)
    assert group.body == wire.dumps(discovery.api_group("custom.metrics.k8s.io"))
    proto = await get(app, "/apis", PROTOBUF)
    assert kubeproto.decode(proto.body)[:2] == ("", "APIGroupList")


@pytest.mark.parametrize(
    "path",
    [
        "/apis/custom.metrics.k8s.io",
        "/apis/custom.metrics.k8s.io/v1beta2",
        "/apis/external.metrics.k8s.io/v1beta1",
        "/apis/metrics.k8s.io",
        "/apis/metrics.k8s.io/v1",
    ],
)
async def test_group_and_version_paths_serve_no_aggregated_document(path: str) -> None:
    """kube-apiserver wraps only /api and /apis: a group or version path asked only for v2 is
    a 406 (NegotiateOutputMediaType with the default restrictions), with a fallback the plain
    document."""
    app = full_app()
    refused = await get(app, path, AGGREGATOR)
    assert refused.status == 406
    status = json.loads(refused.body)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "NotAcceptable", 406)
    fallback = await get(app, path, KUBECTL)
    assert fallback.status == 200
    assert fallback.headers["content-type"] == "application/json"
    assert json.loads(fallback.body)["kind"] in ("APIGroup", "APIResourceList")


@pytest.mark.parametrize(
    "accept",
    [
        "text/html",
        "application/yaml",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "APPLICATION/JSON",
        "application/json;sv=v1",
    ],
)
async def test_an_accept_we_cannot_honour_is_a_406_status_at_the_root(accept: str) -> None:
    reply = await get(full_app(), "/apis", accept)
    assert reply.status == 406
    assert reply.headers["content-type"] == "application/json"
    status = json.loads(reply.body)
    assert status["reason"] == "NotAcceptable"
    assert status["message"] == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )


async def test_pretty_and_head() -> None:
    app = full_app()
    compact = await get(app, "/apis", AGGREGATOR)
    for path, accept, headers in (
        ("/apis?pretty=true", AGGREGATOR, {}),
        ("/apis", f"{AGGREGATOR};pretty=1", {}),
        ("/apis", AGGREGATOR, {"user_agent": "curl/8.5.0"}),
    ):
        pretty = await get(app, path, accept, **headers)
        assert pretty.body.startswith(b'{\n  "kind": "APIGroupDiscoveryList"')
        assert json.loads(pretty.body) == json.loads(compact.body)
        assert pretty.headers["etag"] == compact.headers["etag"]
    head = await call(app, scope_for("HEAD", b"/apis", headers=[(b"accept", AGGREGATOR.encode())]))
    assert head.status == 200
    assert head.headers["etag"] == compact.headers["etag"]


async def test_the_demo_core_api_has_its_aggregated_document() -> None:
    core = DemoCoreApi({"nodes": [{"metadata": {"name": "n1"}}], "pods": []})
    app = create_app(
        cluster=contract_app().engine.cluster,
        backends=[],
        settings=AppSettings(demo_core_api=core),
    )
    reply = await get(app, "/api", KUBECTL)
    document = json.loads(reply.body)
    assert reply.headers["content-type"] == f"application/json;{V2}"
    # The legacy group "": ObjectMeta's name is omitempty.
    assert document["items"][0]["metadata"] == {"creationTimestamp": None}
    assert (
        client_go_lists(document)["v1"]
        == json.loads((await get(app, "/api/v1", "application/json")).body)["resources"]
    )
    proto = await get(app, "/api", f"{PROTOBUF};{V2}")
    kubeproto.same_values(document, proto.body)
    assert json.loads((await get(app, "/api", "application/json")).body)["kind"] == "APIVersions"
    assert (await get(app, "/api/v1", AGGREGATOR)).status == 406


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "application/json",
                PROTOBUF,
                "*/*",
                "application/*",
                "text/html",
                "APPLICATION/JSON",
                "application/json;" + V2,
                f"{PROTOBUF};{V2}",
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
                "application/json;as=Table;v=v1;g=meta.k8s.io",
                "application/json;q=0",
                "application/json;q=x",
                "application/json;stream=watch",
                "application/json;sv=v1",
                "*",
                "",
                "a/b/c",
                ";;;",
                "application/json;pretty=1",
            ]
        ),
        max_size=5,
    ),
    st.text(max_size=12),
)
def test_any_accept_is_answered_by_negotiation_without_a_crash(
    clauses: list[str], noise: str
) -> None:
    accept = ",".join(clauses) + noise
    for aggregated in (True, False):
        chosen = negotiate_discovery(accept, aggregated=aggregated)
        if isinstance(chosen, NotAcceptable):
            assert chosen.code == 406
        else:
            assert chosen.aggregated <= aggregated
            assert chosen.media_type in ("application/json", PROTOBUF)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sets(
                st.tuples(
                    st.sampled_from(["pods", "nodes", "deployments.apps"]),
                    st.sampled_from(["a", "b", "c"]),
                )
            ),
            st.sets(st.sampled_from(["q1", "q2"])),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_cached_document_equals_one_rendered_afresh_through_listing_changes(
    states: list[tuple[set[tuple[str, str]], set[str]]],
) -> None:
    """The aggregated document kept per served state (`ServedDiscovery._aggregated`) against
    one rendered by a server that never rendered before, through published listings that
    grow, shrink, change back and repeat (JSON, protobuf and ETag)."""
    contract = contract_app()
    backend = MemoryBackend("m")
    kept = ServedDiscovery(QueryEngine(cluster=contract.engine.cluster, backends=[backend]))
    for custom, external in states:
        builder = SnapshotBuilder(contract.engine.cluster, timestamp=1_767_000_000.0)
        for resource, metric in sorted(custom):
            builder.declare(resource, metric)
        for metric in sorted(external):
            builder.add_external(metric, 1)
        backend.publish(builder.build())
        fresh = ServedDiscovery(QueryEngine(cluster=contract.engine.cluster, backends=[backend]))
        cached, rendered = kept.aggregated(), fresh.aggregated()
        assert (cached.json, cached.etag) == (rendered.json, rendered.etag)
        assert cached.protobuf == rendered.protobuf
