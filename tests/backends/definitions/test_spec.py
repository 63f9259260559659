"""MetricDefinition objects into typed definitions, and the checks only the server can make."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from custom_metrics_server.backends.definitions.spec import parse_definition, selector_of
from custom_metrics_server.domain import GroupResource

Obj = dict[str, Any]


def definition(spec: Obj, *, name: str = "d", namespace: str = "shop") -> Obj:
    return {
        "apiVersion": "metrics.custom-metrics-server.io/v1alpha1",
        "kind": "MetricDefinition",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-12-01T10:00:00Z",
            "generation": 3,
        },
        "spec": spec,
    }


SCHEDULE: Obj = {
    "metricName": "expected_load",
    "servedAs": {"type": "External"},
    "source": {
        "type": "Schedule",
        "schedule": {
            "timeZone": "Europe/Paris",
            "windows": [
                {"days": ["Mon", "Fri"], "start": "08:00", "end": "19:00", "value": 10},
                {"start": "19:00", "end": "24:00", "value": 2.5},
            ],
            "defaultValue": 1,
        },
    },
    "interval": "1m",
    "absent": "zero",
}

PODS: Obj = {
    "metricName": "inflight",
    "servedAs": {
        "type": "Object",
        "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "podValues": "average",
    },
    "source": {
        "type": "Pods",
        "pods": {
            "selector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}],
            },
            "port": "metrics",
            "metric": "http_requests_total",
            "type": "counter",
        },
    },
}


def test_a_schedule_definition_is_read_whole() -> None:
    parsed = parse_definition(definition(SCHEDULE))
    assert parsed.refusal is None
    assert (parsed.namespace, parsed.name, parsed.uid, parsed.generation) == (
        "shop",
        "d",
        "uid-d",
        3,
    )
    assert parsed.metric == "expected_load"
    assert parsed.served_as.type == "External"
    assert parsed.interval == 60.0
    assert parsed.absent == "zero"
    assert parsed.failure == "error"
    schedule = parsed.schedule
    assert schedule is not None
    assert str(schedule.zone) == "Europe/Paris"
    assert [(w.days, w.start, w.end, w.value) for w in schedule.windows] == [
        (frozenset({0, 4}), 480, 1140, 10.0),
        (frozenset(), 1140, 1440, 2.5),
    ]
    assert schedule.default == 1.0


def test_a_pods_definition_as_an_object_metric() -> None:
    parsed = parse_definition(definition(PODS))
    assert parsed.refusal is None
    assert parsed.interval == 30.0  # the CRD's default when unset
    assert parsed.served_as.workload == (GroupResource("apps", "deployments"), "web")
    assert parsed.served_as.pod_values == "average"
    pods = parsed.pods
    assert pods is not None
    assert (pods.port, pods.path, pods.metric, pods.counter) == (
        "metrics",
        "/metrics",
        "http_requests_total",
        True,
    )
    assert str(pods.selector) == "app=web,tier notin (db)"
    assert pods.selector.matches({"app": "web", "tier": "front"})
    assert not pods.selector.matches({"app": "web", "tier": "db"})


def test_an_unknown_time_zone_is_refused_with_a_reason_naming_the_field() -> None:
    spec = copy.deepcopy(SCHEDULE)
    spec["source"]["schedule"]["timeZone"] = "Mars/Olympus_Mons"
    parsed = parse_definition(definition(spec))
    assert parsed.refusal is not None
    reason, message = parsed.refusal
    assert reason == "UnknownTimeZone"
    assert "spec.source.schedule.timeZone" in message
    assert "Mars/Olympus_Mons" in message


@pytest.mark.parametrize(
    ("mutate", "reason", "field"),
    [
        (lambda s: s["source"]["pods"].update(port=70000), "InvalidPort", "port"),
        (lambda s: s["source"]["pods"].update(path="metrics"), "InvalidPath", "path"),
        (
            lambda s: s["source"]["pods"]["selector"].update(matchLabels={"bad key!": "x"}),
            "InvalidSelector",
            "selector",
        ),
        (
            lambda s: s["source"]["pods"]["selector"].update(
                matchExpressions=[{"key": "a", "operator": "Gt", "values": ["1"]}]
            ),
            "InvalidSelector",
            "operator",
        ),
        (lambda s: s.update(interval="soon"), "InvalidSpec", "spec.interval"),
        (lambda s: s["source"].update(type="Formula"), "InvalidSpec", "spec.source"),
        (lambda s: s.pop("metricName"), "InvalidSpec", "spec.metricName"),
    ],
)
def test_specs_written_around_the_crds_rules_are_refused(
    mutate: Any, reason: str, field: str
) -> None:
    spec = copy.deepcopy(PODS)
    mutate(spec)
    parsed = parse_definition(definition(spec))
    assert parsed.refusal is not None, spec
    assert parsed.refusal[0] == reason
    assert field in parsed.refusal[1]


def test_a_one_value_source_is_served_as_external_only() -> None:
    spec = copy.deepcopy(SCHEDULE)
    spec["servedAs"] = {"type": "Pods"}
    parsed = parse_definition(definition(spec))
    assert parsed.refusal is not None
    assert "External only" in parsed.refusal[1]


def test_the_empty_selector_selects_every_pod_of_the_namespace() -> None:
    assert selector_of(None).is_everything()
    assert selector_of({}).is_everything()


def test_an_object_without_metadata_is_not_a_definition() -> None:
    with pytest.raises(KeyError):
        parse_definition({"spec": SCHEDULE})
