"""The conformance kit over the wire: a backend served by a real server process over TLS, and
every URL form of the metric APIs asked of it, each answer decoded and checked.

    with serve_backends(tmp_path, [{"name": "jobs", "type": "jobs_backend:make",
                                     "settings": {...}}],
                        objects=[{"resource": "pods", "namespace": "default",
                                  "name": "web-0", "labels": {"app": "web"}}],
                        pythonpath=[plugin_dir]) as server:
        query_every_form(server,
                         custom=[CustomQuery("pods", "jobs_running", "default", "web-0",
                                             label_selector="app=web")],
                         external=[ExternalQuery("jobs_waiting", "default")])

`serve_backends` writes a backends file (with `objects`, a `fixture` backend named `objects`
first, which provides the cluster view: the objects `*` and `labelSelector` resolve to) and runs
`custom-metrics-server serve --demo --backends-config FILE`: loopback, no delegated
authentication, the server's own self-signed certificate, which the client verifies.

`query_every_form` asks, for each custom query: the named object in v1beta2, v1beta1 and
`custom-metrics/v1alpha1`, the wildcard with the label selector in each version, the
cluster-wide wildcard (namespaced resources), the namespace-metrics form (instead of the
others, for `namespaces`) and the protobuf form of v1beta2, each with `metric_selector` as its
`metricLabelSelector`; for each external query, the metric with and without its label
selector; and the discovery documents. Every answer must be 200 and decode to the
version's shape with the metric's name, a Kubernetes quantity and an RFC 3339 timestamp; a named
object must have exactly one item. It raises `AssertionError` listing every failure (or returns
the answers with `strict=False`).

Its client is `ServerProcess.client()`'s (httpx, from the `test` extra).
"""

from __future__ import annotations

import datetime as dt
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
import yaml

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.testing.server_process import ServerProcess, start_server

__all__ = ["Answer", "CustomQuery", "ExternalQuery", "query_every_form", "serve_backends"]

PROTOBUF = "application/vnd.kubernetes.protobuf"


@dataclass(frozen=True)
class CustomQuery:
    """A custom metric to ask for: of `resource` (`pods`, `deployments.apps`), the object
    `name` (in `namespace`; None for cluster-scoped resources) must have a value. A
    `namespaces` metric is asked in its own form, `/namespaces/{name}/metrics/{metric}`."""

    resource: str
    metric: str
    namespace: str | None
    name: str
    label_selector: str = ""
    metric_selector: str = ""


@dataclass(frozen=True)
class ExternalQuery:
    """An external metric to ask for in `namespace` (with `label_selector`, if any)."""

    metric: str
    namespace: str = "default"
    label_selector: str = ""


@dataclass
class Answer:
    """One URL asked, its status and body, and what was wrong with it."""

    url: str
    status: int
    body: Any
    problems: list[str] = field(default_factory=list)


def serve_backends(
    workdir: Path,
    backends: Sequence[Mapping[str, Any]],
    *,
    objects: Sequence[Mapping[str, Any]] | None = None,
    pythonpath: Sequence[Path | str] = (),
    args: Sequence[str] = (),
    timeout: float = 30,
    ready: bool = True,
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start the real server on `backends` (entries of a backends file); see the module.
    `pythonpath` is prepended to the server's PYTHONPATH (where an unpackaged plugin lives)."""
    workdir.mkdir(parents=True, exist_ok=True)
    entries = [dict(entry) for entry in backends]
    if objects is not None:
        entries.insert(
            0, {"name": "objects", "type": "fixture", "settings": {"objects": list(objects)}}
        )
    path = workdir / "backends.yaml"
    path.write_text(yaml.safe_dump({"backends": entries}, sort_keys=False))
    environment = dict(env or {})
    paths = [str(p) for p in pythonpath]
    if paths:
        inherited = environment.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        environment["PYTHONPATH"] = os.pathsep.join([*paths, *([inherited] if inherited else [])])
    return start_server(
        workdir,
        "--backends-config",
        str(path),
        *args,
        demo=True,
        timeout=timeout,
        ready=ready,
        env=environment,
    )


def _quantity(value: object, problems: list[str], where: str) -> None:
    try:
        Quantity.parse(str(value))
    except (ValueError, ArithmeticError):
        problems.append(f"{where}: value {value!r} is not a Kubernetes quantity")


def _timestamp(value: object, problems: list[str], where: str) -> None:
    try:
        dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        problems.append(f"{where}: timestamp {value!r} is not RFC 3339")


def _check_custom_list(answer: Answer, version: str, metric: str, named: bool) -> None:
    body, problems = answer.body, answer.problems
    if not isinstance(body, dict) or body.get("kind") != "MetricValueList":
        problems.append(f"not a MetricValueList: {str(body)[:200]}")
        return
    items = body.get("items")
    if not isinstance(items, list):
        problems.append("items is not a list")
        return
    if named and len(items) != 1:
        problems.append(f"a named object answered {len(items)} items, not 1")
    for index, item in enumerate(items):
        where = f"items[{index}]"
        described = item.get("describedObject") or {}
        if not {"kind", "name", "apiVersion"} <= described.keys():
            problems.append(f"{where}: describedObject lacks kind, name or apiVersion: {described}")
        name = (
            (item.get("metric") or {}).get("name")
            if version == "v1beta2"
            else item.get("metricName")
        )
        if name != metric:
            problems.append(f"{where}: metric name {name!r}, not {metric!r}")
        _quantity(item.get("value"), problems, where)
        _timestamp(item.get("timestamp"), problems, where)


def _check_external_list(answer: Answer, metric: str) -> None:
    body, problems = answer.body, answer.problems
    if not isinstance(body, dict) or body.get("kind") != "ExternalMetricValueList":
        problems.append(f"not an ExternalMetricValueList: {str(body)[:200]}")
        return
    for index, item in enumerate(body.get("items") or ()):
        where = f"items[{index}]"
        if item.get("metricName") != metric:
            problems.append(f"{where}: metricName {item.get('metricName')!r}, not {metric!r}")
        if not isinstance(item.get("metricLabels", {}), dict):
            problems.append(f"{where}: metricLabels is not a map")
        _quantity(item.get("value"), problems, where)
        _timestamp(item.get("timestamp"), problems, where)


def _get(client: httpx.Client, url: str, **headers: str) -> Answer:
    response = client.get(url, headers=headers)
    body: Any = response.content
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
    answer = Answer(url, response.status_code, body)
    if response.status_code != 200:
        answer.problems.append(f"status {response.status_code}: {str(body)[:300]}")
    return answer


def _query_string(**parameters: str) -> str:
    given = {name: value for name, value in parameters.items() if value}
    return "?" + urllib.parse.urlencode(given) if given else ""


_PREFIXES: Final = {
    "v1beta2": "/apis/custom.metrics.k8s.io/v1beta2",
    "v1beta1": "/apis/custom.metrics.k8s.io/v1beta1",
    "v1alpha1": "/apis/custom-metrics/v1alpha1",
}


def _custom_answers(client: httpx.Client, query: CustomQuery) -> list[Answer]:
    answers = []
    where = f"namespaces/{query.namespace}/" if query.namespace is not None else ""
    named_query = _query_string(metricLabelSelector=query.metric_selector)
    wildcard_query = _query_string(
        labelSelector=query.label_selector, metricLabelSelector=query.metric_selector
    )
    if query.resource == "namespaces":
        named_path = f"namespaces/{query.name}/metrics/{query.metric}"
    else:
        named_path = f"{where}{query.resource}/{query.name}/{query.metric}"
    for version, prefix in _PREFIXES.items():
        named = _get(client, f"{prefix}/{named_path}{named_query}")
        if named.status == 200:
            _check_custom_list(named, version, query.metric, named=True)
        answers.append(named)
        if query.resource == "namespaces":
            continue
        wildcard = _get(
            client, f"{prefix}/{where}{query.resource}/*/{query.metric}{wildcard_query}"
        )
        if wildcard.status == 200:
            _check_custom_list(wildcard, version, query.metric, named=False)
            items = wildcard.body.get("items") or []
            if query.name not in {i.get("describedObject", {}).get("name") for i in items}:
                wildcard.problems.append(f"{query.name} is not among the items")
        answers.append(wildcard)
    v1beta2 = _PREFIXES["v1beta2"]
    if query.namespace is not None and query.resource != "namespaces":
        spanning = _get(client, f"{v1beta2}/{query.resource}/*/{query.metric}{wildcard_query}")
        if spanning.status == 200:
            _check_custom_list(spanning, "v1beta2", query.metric, named=False)
        answers.append(spanning)
    binary = _get(client, f"{v1beta2}/{named_path}{named_query}", accept=PROTOBUF)
    if binary.status == 200 and not (
        isinstance(binary.body, bytes) and binary.body.startswith(b"k8s\x00")
    ):
        binary.problems.append("the protobuf answer lacks the k8s envelope")
    answers.append(binary)
    discovery = _get(client, v1beta2)
    if discovery.status == 200:
        names = {r.get("name") for r in discovery.body.get("resources", ())}
        resource = query.resource.split(".", 1)[0] if query.resource else query.resource
        wanted = {f"{query.resource}/{query.metric}", f"{resource}/{query.metric}"}
        if not wanted & names:
            discovery.problems.append(f"{query.resource}/{query.metric} is not in discovery")
    answers.append(discovery)
    return answers


def _external_answers(client: httpx.Client, query: ExternalQuery) -> list[Answer]:
    base = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{query.namespace}/{query.metric}"
    answers = [_get(client, base)]
    if query.label_selector:
        answers.append(
            _get(client, f"{base}?labelSelector={urllib.parse.quote(query.label_selector)}")
        )
    for answer in answers:
        if answer.status == 200:
            _check_external_list(answer, query.metric)
    discovery = _get(client, "/apis/external.metrics.k8s.io/v1beta1")
    if discovery.status == 200:
        names = {r.get("name") for r in discovery.body.get("resources", ())}
        if query.metric not in names:
            discovery.problems.append(f"{query.metric} is not in the discovery document")
    answers.append(discovery)
    return answers


def query_every_form(
    server: ServerProcess,
    *,
    custom: Sequence[CustomQuery] = (),
    external: Sequence[ExternalQuery] = (),
    strict: bool = True,
) -> list[Answer]:
    """Ask every URL form (see the module); AssertionError listing each failure."""
    answers: list[Answer] = []
    with server.client() as client:
        for query in custom:
            answers += _custom_answers(client, query)
        for one in external:
            answers += _external_answers(client, one)
    failed = [answer for answer in answers if answer.problems]
    if strict and failed:
        lines = [f"{a.url}: {problem}" for a in failed for problem in a.problems]
        raise AssertionError("\n".join(lines))
    return answers
