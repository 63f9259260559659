"""The metric status page lists application teams' MetricDefinitions (namespace, name, metric,
source, ready and why, last value), as JSON and as the text table, beside the platform's
metrics; the real `metric-definitions` backend in process, fed its definitions as its watch
would."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.query.routes import Host
from custom_metrics_server.server.app import create_app
from tests.backends.definitions.test_serving import backend, constant, obj
from tests.query.test_explain import get

STATUS = "/apis/custom.metrics.k8s.io/v1beta2/metric-status"


def definitions_app() -> Any:
    made = backend()
    made.catalog.event("ADDED", obj(constant(7), "office-hours", namespace="shop"))
    bad = constant(1, metricName="night_load")
    bad["source"]["schedule"]["timeZone"] = "Mars/Olympus_Mons"
    made.catalog.event("ADDED", obj(bad, "night", namespace="shop"))
    asyncio.run(made.tick())
    host = Host(backend=made, yields=True, dynamic=True)
    return create_app(cluster=InMemoryCluster(), backends=[host])


def test_the_status_page_lists_definitions_with_their_state() -> None:
    app = definitions_app()
    document = orjson.loads(get(app, STATUS, b"format=json").body)
    rows = {row["name"]: row for row in document["definitions"]}
    assert set(rows) == {"office-hours", "night"}
    served = rows["office-hours"]
    assert (served["namespace"], served["metric"], served["source"]) == (
        "shop",
        "expected_load",
        "Schedule",
    )
    assert (served["ready"], served["reason"], served["lastValue"]) == (True, "Serving", "7")
    refused = rows["night"]
    assert (refused["valid"], refused["ready"], refused["reason"]) == (
        False,
        False,
        "UnknownTimeZone",
    )
    assert refused["lastValue"] is None
    text = get(app, STATUS).body.decode()
    assert "MetricDefinitions:" in text
    line = next(line for line in text.splitlines() if "office-hours" in line)
    assert line.split()[:8] == [
        "shop",
        "office-hours",
        "expected_load",
        "Schedule",
        "True",
        "Serving",
        "-",
        "7",
    ]
    assert "UnknownTimeZone" in next(line for line in text.splitlines() if " night " in line)
