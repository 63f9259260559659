"""The explanation (`?explain=1`), the hints of a 404 (`details.causes`), the per-metric status
(self-metrics and the status page) and the failure policies, in process through the whole app."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

import orjson
import pytest

from custom_metrics_server.api.explanation import API_VERSION, KIND, render_text
from custom_metrics_server.api.grammar import parse_query
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    FailurePolicy,
    GroupResource,
    MetricInfo,
    ObjectRef,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.errors import StatusError
from custom_metrics_server.machinery.labels import EVERYTHING
from custom_metrics_server.plugins.adapter import PluginBackend, capabilities
from custom_metrics_server.query.hints import age, edit_distance, nearest
from custom_metrics_server.query.policy import LastGood, apply_custom, apply_external
from custom_metrics_server.query.routes import Host, Route
from custom_metrics_server.security.requestinfo import request_attributes
from custom_metrics_server.server.app import create_app
from tests import kubeproto
from tests.asgi import Reply, call, scope_for
from tests.conftest import contract_app
from tests.fakes.plugins import Switchable

CUSTOM = "/apis/custom.metrics.k8s.io"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
PROTOBUF = b"application/vnd.kubernetes.protobuf"


def get(app: Any, path: str, query: bytes = b"", accept: bytes | None = None) -> Reply:
    headers = [(b"accept", accept)] if accept else []
    return asyncio.run(call(app, scope_for("GET", path.encode(), query, headers)))


@pytest.fixture(scope="module")
def app() -> Any:
    return contract_app()


# -- hints ----------------------------------------------------------------------------------------


def test_edit_distance_is_levenshtein_within_its_limit() -> None:
    assert edit_distance("http_requests", "http_requests", 2) == 0
    assert edit_distance("http_request", "http_requests", 2) == 1
    assert edit_distance("kitten", "sitting", 3) == 3
    assert edit_distance("kitten", "sitting", 2) == 3  # over the limit: limit + 1
    assert edit_distance("a", "abcdef", 2) == 3


def test_nearest_names_by_edit_distance_then_name() -> None:
    names = ["http_requests_total", "http_requests", "http_errors", "queue_depth", "cpu"]
    assert nearest("http_request", names)[0] == "http_requests"
    assert nearest("queue_dept", names) == ["queue_depth"]
    assert nearest("zzzzzzzz", names) == []


def test_ages_are_short() -> None:
    assert [age(0.25), age(12.9), age(303), age(7500), age(3 * 86400 + 4 * 3600)] == [
        "250ms",
        "12s",
        "5m3s",
        "2h5m",
        "3d4h",
    ]


# -- failure policies -----------------------------------------------------------------------------

PODS = GroupResource("", "pods")
MAPPING = ResourceMapping(PODS, "v1", "Pod", namespaced=True)


def _request(*names: str) -> BackendRequest:
    return BackendRequest(
        metric=MetricInfo(PODS, True, "m"),
        mapping=MAPPING,
        objects=tuple(("ns", name) for name in names),
        metric_selector=EVERYTHING,
    )


def _sample(name: str, value: int, stamp: float) -> Sample:
    return Sample(ObjectRef("Pod", "ns", name, "v1"), "m", value, stamp)


def test_zero_fills_absent_objects_in_request_order() -> None:
    policy = FailurePolicy(absent="zero")
    result = apply_custom(
        policy, _request("a", "b", "c"), [_sample("b", 3, 100.0)], now=200.0, store=LastGood()
    )
    assert [(s.described.name, s.value) for s in result.samples] == [
        ("a", Decimal(0)),
        ("b", 3),
        ("c", Decimal(0)),
    ]
    assert (result.how, result.filled) == ("zero", 2)
    assert result.samples[0].timestamp == 200.0


def test_max_age_makes_old_samples_absent() -> None:
    policy = FailurePolicy(max_age=60)
    result = apply_custom(
        policy,
        _request("a", "b"),
        [_sample("a", 1, 100.0), _sample("b", 2, 190.0)],
        now=200.0,
        store=LastGood(),
    )
    assert [s.described.name for s in result.samples] == ["b"]
    assert result.stale == 1


def test_last_good_serves_the_last_value_within_max_age_then_gives_up() -> None:
    store = LastGood()
    policy = FailurePolicy(failure="last-good", max_age=60)
    request = _request("a")
    apply_custom(policy, request, [_sample("a", 7, 100.0)], now=100.0, store=store)
    covered = apply_custom(policy, request, None, now=150.0, store=store)
    assert [s.value for s in covered.samples] == [7]
    assert covered.how == "last-good"
    expired = apply_custom(policy, request, None, now=161.0, store=store)
    assert list(expired.samples) == []


def test_external_policies() -> None:
    request = ExternalBackendRequest(metric="q", namespace="ns", metric_selector=EVERYTHING)
    store = LastGood()
    zero = apply_external(FailurePolicy(absent="zero"), request, [], now=5.0, store=store)
    assert [(s.value, s.labels) for s in zero.samples] == [(Decimal(0), {})]
    policy = FailurePolicy(failure="last-good", max_age=30)
    good = [ExternalSample("q", {"a": "b"}, 4, 10.0)]
    apply_external(policy, request, good, now=10.0, store=store)
    assert [
        s.value for s in apply_external(policy, request, None, now=20.0, store=store).samples
    ] == [4]
    assert list(apply_external(policy, request, None, now=41.0, store=store).samples) == []


def test_a_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="last-good needs maxAge"):
        FailurePolicy(failure="last-good")
    with pytest.raises(ValueError, match="must be error, zero or last-good"):
        FailurePolicy(absent="maybe")  # type: ignore[arg-type]
    assert FailurePolicy().inert


# -- hints in the Status --------------------------------------------------------------------------


def test_a_metric_nobody_serves_keeps_the_upstream_message_and_says_why(app: Any) -> None:
    reply = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/pod-1/some-metrc")
    assert reply.status == 404
    status = orjson.loads(reply.body)
    assert status["message"] == "the server could not find the metric some-metrc for pods pod-1"
    assert status["details"]["causes"] == [
        {
            "reason": "MetricNotServed",
            "message": "no backend serves metric some-metrc for pods; did you mean some-metric",
            "field": "metric",
        }
    ]


def test_causes_are_carried_in_protobuf_too(app: Any) -> None:
    reply = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/pod-1/some-metrc", accept=PROTOBUF)
    assert reply.status == 404
    api_version, kind, decoded, raw = kubeproto.decode(reply.body)
    assert (api_version, kind) == ("v1", "Status")
    assert kubeproto.canonical(decoded, raw)
    status = kubeproto.to_json_shape(decoded)
    assert status["message"] == "the server could not find the metric some-metrc for pods pod-1"
    assert status["details"]["causes"][0]["reason"] == "MetricNotServed"
    assert "did you mean some-metric" in status["details"]["causes"][0]["message"]


def test_a_named_object_without_a_value_names_the_backend(app: Any) -> None:
    reply = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/nope/some-metric")
    status = orjson.loads(reply.body)
    assert status["message"] == "the server could not find the metric some-metric for pods nope"
    assert status["details"]["causes"][0] == {
        "reason": "NoValue",
        "message": "backend memory has no value of some-metric for pods ns/nope",
    }


def test_a_metric_listed_for_another_resource_says_so(app: Any) -> None:
    reply = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/services/x/some-metric")
    status = orjson.loads(reply.body)
    messages = [cause["message"] for cause in status["details"]["causes"]]
    assert any("some-metric is listed for" in message and "pods" in message for message in messages)


# -- the explanation -------------------------------------------------------------------------------

#: URLs of every form, with their plain answers' codes.
URLS = [
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric", b"labelSelector=foo%3Dbar", 200),
    (f"{CUSTOM}/v1beta1/namespaces/ns/pods/pod-1/some-metric", b"", 200),
    ("/apis/custom-metrics/v1alpha1/namespaces/ns/pods/pod-1/some-metric", b"", 200),
    (f"{CUSTOM}/v1beta2/nodes/node-1/some-metric", b"", 200),
    (f"{CUSTOM}/v1beta2/namespaces/ns/metrics/some-metric", b"", 200),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric", b"labelSelector=foo%3Dnothing", 200),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/nope/some-metric", b"", 404),
    (f"{CUSTOM}/v1beta2/namespaces/ns/podz/pod-1/some-metric", b"", 404),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/pod-1/some-metrc", b"", 404),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric", b"labelSelector=%28", 400),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric", b"metricLabelSelector=a%3Db", 200),
    (f"{EXTERNAL}/namespaces/default/my-external-metric", b"labelSelector=foo%3Dbar", 200),
    (f"{EXTERNAL}/namespaces/default/my-external-metri", b"", 200),
    (f"{CUSTOM}/v1beta2/namespaces/ns/pods/a/b/c/d", b"", 404),
]


@pytest.mark.parametrize(("path", "query", "code"), URLS)
def test_the_explanation_outcome_is_exactly_the_plain_answer(
    app: Any, path: str, query: bytes, code: int
) -> None:
    plain = get(app, path, query)
    assert plain.status == code
    explained = get(app, path, query + (b"&" if query else b"") + b"explain=1")
    assert explained.status == 200
    assert explained.headers["content-type"] == "application/json"
    document = orjson.loads(explained.body)
    assert (document["kind"], document["apiVersion"]) == (KIND, API_VERSION)
    outcome = document["outcome"]
    assert outcome["code"] == code
    if code == 200:
        assert outcome["list"] == orjson.loads(plain.body)
    else:
        assert outcome["status"] == orjson.loads(plain.body)
    assert render_text(document).startswith(f"Request: GET {path}")


def test_the_explanation_walks_the_steps(app: Any) -> None:
    document = orjson.loads(
        get(
            app,
            f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric",
            b"labelSelector=foo%3Dbar&explain=true",
        ).body
    )
    assert document["request"]["labelSelector"] == "foo=bar"
    assert document["resource"]["kind"] == "Pod"
    assert document["route"]["backend"] == "memory"
    assert document["route"]["listed"] is True
    assert document["objects"]["matched"] == 8
    assert document["objects"]["samples"]["withValues"] == 8
    assert document["backend"]["metricStatus"]["requests"]["found"] >= 1


def test_an_empty_selection_says_so(app: Any) -> None:
    document = orjson.loads(
        get(
            app,
            f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric",
            b"labelSelector=app%3Dnothing&explain=1",
        ).body
    )
    assert document["outcome"]["items"] == 0
    assert document["causes"] == [
        {
            "reason": "NoObjects",
            "message": "labelSelector app=nothing matched 0 pods in namespace ns",
            "field": "labelSelector",
        }
    ]


@pytest.mark.parametrize(
    "query", [b"x=1", b"explain=0", b"explain=false", b"explain=", b"Explain=1"]
)
def test_other_parameters_never_change_the_answer(app: Any, query: bytes) -> None:
    for path in (f"{CUSTOM}/v1beta2/namespaces/ns/pods/pod-1/some-metric", f"{CUSTOM}/v1beta2"):
        assert get(app, path, query).body == get(app, path).body


def test_discovery_ignores_explain(app: Any) -> None:
    for path in ("/apis", f"{CUSTOM}/v1beta2", f"{CUSTOM}"):
        assert get(app, path, b"explain=1").body == get(app, path).body


def test_explain_is_authorized_as_the_metric_itself() -> None:
    path = f"{CUSTOM}/v1beta2/namespaces/ns/pods/*/some-metric"
    for query in (b"labelSelector=a%3Db", b""):
        plain = request_attributes("GET", path, query)
        explained = request_attributes("GET", path, query + b"&explain=1")
        assert explained.sar_attributes() == plain.sar_attributes()

    class Deny:
        async def check(self, scope: Any) -> StatusError | None:
            from custom_metrics_server.errors import Forbidden  # noqa: PLC0415

            if scope["path"].endswith("/some-metric"):
                return Forbidden("forbidden: some-metric")
            return None

    denied = contract_app(gate=Deny())
    assert get(denied, path, b"explain=1").status == 403
    assert get(denied, path).status == 403


def test_parse_query_reads_explain() -> None:
    assert parse_query(b"explain=1").explain
    assert parse_query(b"explain=True").explain
    assert not parse_query(b"explain=no").explain
    assert not parse_query(b"").explain


# -- per-metric status ---------------------------------------------------------------------------


def test_unknown_external_metrics_stay_empty_and_are_visible() -> None:
    app = contract_app()
    reply = get(app, f"{EXTERNAL}/namespaces/default/no-such-metric")
    assert reply.status == 200
    assert orjson.loads(reply.body)["items"] == []
    page = get(app, f"{CUSTOM}/v1beta2/metric-status")
    assert page.status == 200
    assert page.headers["content-type"] == "text/plain; charset=utf-8"
    text = page.body.decode()
    assert "Asked for, served by no backend" in text
    assert "external no-such-metric: 1 requests" in text
    exposition = app.metrics.exposition().decode()
    assert (
        'custom_metrics_server_metric_requests_total{api="external",backend="",metric="other",'
        'outcome="not_found",resource=""} 1.0'
    ) in exposition
    assert "no-such-metric" not in exposition  # names nobody lists never become labels


def test_the_status_page_counts_outcomes_per_metric_and_backend() -> None:
    app = contract_app()
    get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/pod-1/some-metric")
    get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/nope/some-metric")
    document = orjson.loads(get(app, f"{EXTERNAL}/metric-status", b"format=json").body)
    assert document["kind"] == "MetricStatusList"
    row = next(
        item
        for item in document["items"]
        if (item["api"], item["resource"], item["metric"]) == ("custom", "pods", "some-metric")
    )
    assert row["backend"] == "memory"
    assert row["requests"]["found"] == 1
    assert row["requests"]["not_found"] == 1
    assert row["lastOutcome"] == "not_found"
    assert row["lastSuccessAgo"]
    exposition = app.metrics.exposition().decode()
    assert (
        'custom_metrics_server_metric_requests_total{api="custom",backend="memory",'
        'metric="some-metric",outcome="found",resource="pods"} 1.0'
    ) in exposition
    assert "custom_metrics_server_metric_last_success_timestamp_seconds{" in exposition
    assert "custom_metrics_server_metric_newest_sample_age_seconds{" in exposition


def test_the_status_page_is_read_only() -> None:
    app = contract_app()
    reply = asyncio.run(call(app, scope_for("POST", f"{CUSTOM}/v1beta2/metric-status".encode())))
    assert reply.status == 405


# -- failure policies through the app -------------------------------------------------------------


def _policy_app(tmp_path: Any, policy: FailurePolicy | None) -> tuple[Any, Any]:
    cluster = InMemoryCluster()
    for name in ("web-0", "api-0"):
        cluster.add("pods", name, namespace="ns", labels={"app": name[:3]})
    state = tmp_path / "state"
    state.write_text("up")
    plugin = Switchable(str(state))
    backend = PluginBackend(plugin, found=capabilities(plugin, where="t"), name="switch")
    asyncio.run(backend.__aenter__())  # started: ready
    route = Route(metric="switch_*", policy=policy, where="test route")
    app = create_app(cluster=cluster, backends=[Host(backend=backend, routes=(route,))])
    return app, state


def _counts(app: Any, metric: str) -> dict[str, int]:
    for stats in app.engine.status.entries():
        if stats.metric == metric:
            return stats.counts()
    return {}


def test_zero_and_last_good_through_the_app(tmp_path: Any) -> None:
    policy = FailurePolicy(absent="zero", failure="last-good", max_age=600, source="test")
    app, state = _policy_app(tmp_path, policy)
    path = f"{CUSTOM}/v1beta2/namespaces/ns/pods/{{}}/switch_pod"
    zero = orjson.loads(get(app, path.format("api-0")).body)
    assert [item["value"] for item in zero["items"]] == ["0"]
    assert orjson.loads(get(app, path.format("web-0")).body)["items"][0]["value"] == "5"
    state.write_text("down")
    kept = get(app, path.format("web-0"))
    assert kept.status == 200
    assert orjson.loads(kept.body)["items"][0]["value"] == "5"
    assert get(app, path.format("api-0")).status == 503  # no last good value: the error stands
    counts = _counts(app, "switch_pod")
    assert counts["zero"] == 1
    assert counts["last_good"] == 1
    assert counts["found"] == 1
    assert counts["error"] == 1
    document = orjson.loads(get(app, path.format("web-0"), b"explain=1").body)
    assert document["route"]["failurePolicy"]["failure"] == "last-good"
    assert document["outcome"]["answeredBy"] == "the failure policy (last good values)"
    assert document["backend"]["lastError"]["message"] == "backend switch: switched off"
    info = app.metrics.exposition().decode()
    assert 'custom_metrics_server_metric_failure_policy_info{absent="zero"' in info


def test_without_a_policy_failures_are_errors_with_causes(tmp_path: Any) -> None:
    app, state = _policy_app(tmp_path, None)
    path = f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-0/switch_pod"
    assert get(app, path).status == 200
    state.write_text("down")
    reply = get(app, path)
    assert reply.status == 503
    status = orjson.loads(reply.body)
    assert status["message"] == "backend switch: switched off"
    assert status["details"]["causes"][0]["reason"] == "LastSuccess"
    state.write_text("up")
    missing = orjson.loads(get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/api-0/switch_pod").body)
    reasons = [cause["reason"] for cause in missing["details"]["causes"]]
    assert reasons == ["NoValue", "BackendFailing"]
    assert "last call failed" in missing["details"]["causes"][1]["message"]


def test_stale_values_are_absent_under_max_age(tmp_path: Any) -> None:
    app, state = _policy_app(tmp_path, FailurePolicy(max_age=60, source="test"))
    state.write_text("stale")
    reply = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-0/switch_pod")
    assert reply.status == 404
    causes = orjson.loads(reply.body)["details"]["causes"]
    assert causes[1]["reason"] == "StaleValues"
    assert "older than maxAge 1m0s" in causes[1]["message"]
    assert time.time()  # the clock is real: the hour-old sample is past 60 s


def test_a_named_object_missing_from_the_cluster_view_is_said_to_be_missing(tmp_path: Any) -> None:
    app, _ = _policy_app(tmp_path, None)
    ghost = get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-ghost/switch_pod")
    assert ghost.status == 200  # the backend answers for the name; the server does not check
    document = orjson.loads(
        get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-ghost/switch_pod", b"explain=1").body
    )
    assert document["objects"]["inClusterView"] is False
    assert document["causes"] == [
        {
            "reason": "NotInClusterView",
            "message": "web-ghost does not exist in the cluster view (2 pods in namespace ns); "
            "the server does not check that a named object exists: the backend answered for the "
            "name it was given",
            "field": "name",
        }
    ]
    assert "  in cluster view:      no (the server does not check; see Why)" in render_text(
        document
    )
    present = orjson.loads(
        get(app, f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-0/switch_pod", b"explain=1").body
    )
    assert present["objects"]["inClusterView"] is True
    assert present["causes"] == []


def test_a_view_without_objects_of_the_resource_cannot_say(tmp_path: Any) -> None:
    app, _ = _policy_app(tmp_path, None)
    document = orjson.loads(
        get(app, f"{CUSTOM}/v1beta2/namespaces/other/pods/web-1/switch_pod", b"explain=1").body
    )
    (found,) = document["causes"]
    assert found["message"].startswith(
        "the cluster view has no pods in namespace other, so it cannot say whether web-1 exists"
    )


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"{CUSTOM}/v1beta2/namespaces/ns/pods/web-0/switch_pod", id="custom"),
        pytest.param(f"{EXTERNAL}/namespaces/ns/switch_total", id="external"),
    ],
)
def test_after_a_plugin_bug_the_explanation_names_the_exception_type_and_the_audit_id(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    app, state = _policy_app(tmp_path, None)
    state.write_text("bug")
    with caplog.at_level("ERROR", logger="custom_metrics_server.query.engine"):
        document = orjson.loads(get(app, path, b"explain=1").body)
    assert document["outcome"]["code"] == 500
    (bug,) = [c for c in document["causes"] if c["reason"] == "BackendBug"]
    audit_id = bug["message"].split("audit id ")[1].split(")")[0]
    assert len(audit_id) == 32
    assert bug["message"] == (
        f"backend switch raised KeyError (audit id {audit_id}); the traceback is in the server's "
        f"log, on the line 'backend switch failed (request id {audit_id})'"
    )
    assert "hunter2" not in orjson.dumps(document).decode()  # the exception's text stays in the log
    (line,) = [r.getMessage() for r in caplog.records if audit_id in r.getMessage()]
    assert line.startswith(f"backend switch failed (request id {audit_id}): KeyError")
