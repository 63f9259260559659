"""What `?explain=1` and the metric status page say of MetricDefinitions the platform wins: the
request's route names the platform backend that answers and the definitions it shadows
(`ShadowedByPlatform`), and the status page's row names it (`shadowedBy`), as JSON and text.
The real `metric-definitions` backend and the real server's chain in process, the platform a
backend that lists."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from custom_metrics_server.api.explanation import render_text
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.query.precedence import RouterPrecedence
from custom_metrics_server.query.routes import Host
from custom_metrics_server.server.app import create_app
from tests.backends.definitions.test_serving import (
    POD_VALUES,
    PODS,
    Fixed,
    backend,
    constant,
    obj,
    pods_definition,
)
from tests.query.test_explain import get
from tests.query.test_routing import Listed
from tests.query.test_status_page import STATUS

EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/shop/expected_load"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/shop/pods/web-1/inflight"


def shadowed_app() -> Any:
    made = backend(Pods=lambda definition, tools: Fixed(list(POD_VALUES)))
    platform = Listed("prometheus", custom=[(PODS, "inflight")], external=["expected_load"])
    app = create_app(
        cluster=InMemoryCluster(),
        backends=[Host(backend=made, yields=True, dynamic=True), Host(backend=platform)],
    )
    made.yield_to(RouterPrecedence(app.engine.router))
    made.catalog.event("ADDED", obj(constant(7), "load"))
    made.catalog.event("ADDED", obj(pods_definition({"type": "Pods"}), "inflight"))
    asyncio.run(made.tick())
    return app


def test_the_explanation_names_the_definitions_the_answering_backend_shadows() -> None:
    app = shadowed_app()
    for path, name in ((EXTERNAL, "load"), (CUSTOM, "inflight")):
        document = orjson.loads(get(app, path, b"explain=1").body)
        route = document["route"]
        assert route["backend"] == "prometheus"
        (shadow,) = route["shadows"]
        assert shadow["backend"] == "metric-definitions"
        assert shadow["servedBy"] is None
        (definition,) = shadow["definitions"]
        assert (definition["name"], definition["reason"], definition["shadowedBy"]) == (
            name,
            "ShadowedByPlatform",
            "backend prometheus",
        )
        text = render_text(document)
        assert f"MetricDefinition shop/{name} (metric-definitions): ShadowedByPlatform" in text, (
            text
        )


def test_the_status_page_row_names_the_platform_backend() -> None:
    app = shadowed_app()
    document = orjson.loads(get(app, STATUS, b"format=json").body)
    rows = {row["name"]: row for row in document["definitions"]}
    for name in ("load", "inflight"):
        row = rows[name]
        assert (row["ready"], row["reason"], row["shadowedBy"]) == (
            False,
            "ShadowedByPlatform",
            "backend prometheus",
        )
    text = get(app, STATUS).body.decode()
    line = next(line for line in text.splitlines() if " load " in line)
    assert line.split()[4:8] == ["False", "ShadowedByPlatform", "backend", "prometheus"]
