"""The schema-decoded path (`cluster_state.wire_objects`) against the dict path: the same JSON must
give the same records, indexes, failures and watch events, on the envelope's fake world and
on the resource model's and the lifecycle's edge cases (init containers, sidecars, overhead,
pod-level resources, resize status, missing fields, unknown fields, nulls, wrong types)."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import orjson
import pytest

from custom_metrics_server.cluster_state.records import (
    NAMESPACES,
    NODES,
    PODS,
    WORKLOADS,
    ClusterState,
)
from custom_metrics_server.cluster_state.wire_objects import (
    NodeWire,
    ObjectWire,
    PodWire,
    WireCodec,
    model_pod,
)
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.kube.wire_codec import dict_event
from tests.fakes.envelope_world import (
    make_node,
    make_pod,
    namespace_name,
    plan_world,
    scale_shape,
    workload_objects,
)
from tests.resources import test_model as rm
from tests.resources import test_model_pod_level as rmpl

Obj = dict[str, Any]
CODECS = {PODS: WireCodec(PodWire), NODES: WireCodec(NodeWire)}


def _codec(gr: GroupResource) -> WireCodec[Any]:
    return CODECS.get(gr) or WireCodec(ObjectWire)


def _page(items: list[Obj]) -> bytes:
    return orjson.dumps({"metadata": {"resourceVersion": "7"}, "items": items})


def _feed(state: ClusterState, gr: GroupResource, items: Iterable[Any]) -> list[str]:
    """List `items` into the state's sink as the reflector does; the failures, in order."""
    sink = state.sink(gr)
    failures = []
    sink.list_started()
    for item in items:
        try:
            sink.listed(item)
        except Exception as err:
            failures.append(type(err).__name__)
    sink.list_finished()
    return failures


def _snapshot(state: ClusterState) -> dict[str, Any]:
    """Everything the records hold, comparable."""
    return {
        "pods": {
            k: (*v[:6], *(dict(m) for m in v[6:8]), v[8], *(dict(m) for m in v[9:]))
            for k, v in state.pods.items()
        },
        "nodes": state.nodes,
        "objects": {
            str(gr): {k: (dict(r.labels), r.owners) for k, r in state.inventory.table(gr).items()}
            for gr in (PODS, NODES, NAMESPACES, *WORKLOADS)
        },
        "by_node": {n: sorted(keys) for n, keys in state._by_node.items()},
        "child_pods": state._child_pods,
        "children": state._children,
    }


def _both(objects: dict[GroupResource, list[Obj]]) -> tuple[ClusterState, ClusterState]:
    """The same objects through the dict path and through the wire path (one page each)."""
    by_dict, by_wire = ClusterState(), ClusterState()
    for gr, items in objects.items():
        page = _page(items)
        decoded = _codec(gr).page(page)
        assert decoded.resource_version == "7"
        assert _feed(by_dict, gr, orjson.loads(page)["items"]) == _feed(by_wire, gr, decoded.items)
    return by_dict, by_wire


def test_the_envelope_world_gives_the_same_records() -> None:
    plan = plan_world(scale_shape(2000))
    pods = [make_pod(plan, i) for i in range(2000)]
    # A few pods off the template: deleted, pending, finished, resized, with sidecars.
    pods[1]["metadata"]["deletionTimestamp"] = "2026-11-20T10:00:00Z"
    pods[2]["spec"].pop("nodeName", None)
    pods[3]["status"]["phase"] = "Succeeded"
    pods[4]["status"]["containerStatuses"] = [
        {
            "name": "app",
            "allocatedResources": {"cpu": "300m"},
            "resources": {"requests": {"cpu": "300m"}},
        }
    ]
    pods[5]["spec"]["initContainers"] = [
        {"name": "mesh", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    ]
    workloads: dict[GroupResource, list[Obj]] = {}
    for resource, obj in workload_objects(plan):
        gr = next(g for g in WORKLOADS if f"{g.resource}.{g.group}" == resource)
        workloads.setdefault(gr, []).append(obj)
    namespaces = sorted({p["metadata"]["namespace"] for p in pods} | {namespace_name(0)})
    objects = {
        PODS: pods,
        NODES: [make_node(i) for i in range(len(plan.pods_by_node()))],
        NAMESPACES: [{"metadata": {"name": n, "labels": {"team": n}}} for n in namespaces],
        **workloads,
    }
    by_dict, by_wire = _both(objects)
    assert len(by_wire.pods) == 2000
    assert len(by_wire.nodes) > 0
    assert _snapshot(by_wire) == _snapshot(by_dict)


def _named(pods: Iterable[Any]) -> list[Obj]:
    named = []
    for index, original in enumerate(pods):
        pod = copy.deepcopy(original)
        if isinstance(pod, dict):
            metadata = pod.setdefault("metadata", {})
            if isinstance(metadata, dict):
                metadata.setdefault("name", f"pod-{index}")
                metadata.setdefault("namespace", "ns")
        named.append(pod)
    return named


def _cases(*tables: list[Any]) -> list[Obj]:
    return [param.values[0] for table in tables for param in table]


EDGE_PODS = [
    *_cases(
        rm.BOTH_CASES,
        rm.REQUEST_CASES,
        rm.LIMIT_CASES,
        rm.POD_LEVEL_CASES,
        rm.POD_LEVEL_LIMIT_CASES,
        rm.LENIENT_INPUTS,
        rm.LIFECYCLE_CASES,
        rmpl.COMBINED_CASES,
    ),
    rm.RESIZING,
    {"metadata": None},
    {"metadata": {"name": None}},
    {"metadata": {"name": "p", "namespace": "ns", "labels": None, "ownerReferences": None}},
    {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "a"},
                {"kind": None, "name": "b", "controller": True},
            ],
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "nodeName": None,
            "schedulerName": "other",
            "priority": 1000,
            "overhead": {"cpu": "10m"},
            "resources": {"requests": {"cpu": "2"}, "limits": None},
            "containers": [{"name": None, "resources": None, "env": [{"name": "X"}]}],
            "initContainers": None,
            "volumes": [{"name": "v", "emptyDir": {}}],
            "unknown": {"nested": [1, 2, 3]},
        },
        "status": {
            "phase": None,
            "resize": "Infeasible",
            "resources": None,
            "conditions": [{"type": "PodResizePending", "reason": None, "status": "True"}],
            "containerStatuses": [{"name": None, "state": {"terminated": None}, "image": "x"}],
        },
    },
    {
        "metadata": {"name": "r"},
        "status": {"containerStatuses": [{"name": "app", "resources": None}]},
    },
    {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {
            "containerStatuses": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}],
            "conditions": [{"type": "PodResizePending", "reason": "Deferred"}],
        },
    },
    {
        "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n", "containers": [{"name": "app"}]},
        "status": {"conditions": {"type": "PodResizePending"}},  # an object: a TypeError
    },
    {
        "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "n", "containers": [{"name": "app"}], "initContainers": None},
        "status": {"containerStatuses": [{"name": "app", "state": {"terminated": {}}}]},
    },
]
#: Fields of another JSON type than the schema's: their page goes the dict way.
OTHER_TYPES = [
    *_cases(rm.BAD_TYPES),
    {"spec": {"containers": [{"name": "a", "restartPolicy": 3}]}},
    {"spec": {"priority": 1.5}},
    {"metadata": {"labels": {"a": 1}}},
    {"status": {"containerStatuses": "not a list"}},
]


@pytest.mark.parametrize(
    "pods", [_named(EDGE_PODS), _named(_cases(rm.BAD_TYPES))], ids=["edges", "bad"]
)
def test_edge_pods_give_the_same_records(pods: list[Obj]) -> None:
    by_dict, by_wire = _both({PODS: pods})
    assert len(by_dict.pods) > 0 or pods == []
    assert _snapshot(by_wire) == _snapshot(by_dict)


def test_each_edge_pod_alone() -> None:
    """Pod by pod (a page of one: a pod of another shape sends only itself the dict way)."""
    typed = 0
    for pod in _named(EDGE_PODS + OTHER_TYPES):
        items = _codec(PODS).page(_page([pod])).items
        typed += all(isinstance(item, PodWire) for item in items)
        by_dict, by_wire = _both({PODS: [pod]})
        assert _snapshot(by_wire) == _snapshot(by_dict), pod
    # Only the other types went the dict way, except the two bad types inside a resource list
    # (kept as bytes: the model refuses them on both paths, and the snapshots agree).
    assert typed == len(EDGE_PODS) + 2


def test_model_pod_holds_only_the_model_fields() -> None:
    pod = _named([rm.RESIZING])[0]
    wire = _codec(PODS).page(_page([pod])).items[0]
    assert isinstance(wire, PodWire)
    found = model_pod(wire)
    assert set(found) <= {"spec", "status"}
    assert found["spec"]["containers"][0]["resources"] == pod["spec"]["containers"][0]["resources"]


def _versioned(pod: Obj) -> Obj:
    pod["metadata"]["resourceVersion"] = "11"
    return pod


EVENTS = [
    {"type": "ADDED", "object": _versioned(make_pod(plan_world(scale_shape(100)), 3))},
    {
        "type": "DELETED",
        "object": {"metadata": {"name": "a", "namespace": "b", "resourceVersion": "9"}},
    },
    {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "12"}}},
    {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "m"},
    },
    {"type": "SURPRISE", "object": {"whatever": 1}},
    {"type": "MODIFIED", "object": {"metadata": {"name": 5, "resourceVersion": "3"}}},
]


@pytest.mark.parametrize("event", EVENTS, ids=[e["type"] for e in EVENTS])
def test_watch_events_decode_as_the_dict_path(event: Obj) -> None:
    line = orjson.dumps(event).decode()
    wire, plain = _codec(PODS).event(line), dict_event(orjson.loads(line))
    assert (wire.type, wire.resource_version) == (plain.type, plain.resource_version)
    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
        by_dict, by_wire = ClusterState(), ClusterState()
        failures = []
        for state, obj in ((by_dict, plain.object), (by_wire, wire.object)):
            try:
                state.sink(PODS).event(wire.type, obj)
                failures.append("")
            except Exception as err:  # the reflector logs and skips these
                failures.append(type(err).__name__)
        assert failures[0] == failures[1]
        assert _snapshot(by_wire) == _snapshot(by_dict)
    else:
        assert wire.object == plain.object or event["type"] == "BOOKMARK"


@pytest.mark.parametrize(
    "line",
    [b'{"type":"ADDED","object":{"metadata":{}}}', b"{not json", b'{"object":{}}'],
    ids=["no-version", "malformed", "no-type"],
)
def test_malformed_events_raise_what_the_reflector_catches(line: bytes) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        _codec(PODS).event(line)
    with pytest.raises((KeyError, TypeError, ValueError)):
        dict_event(orjson.loads(line))


def test_escaped_keys_in_the_kept_bytes_are_read() -> None:
    """A key or value spelled with JSON escapes is still itself: the substring search must
    not miss a resize (two pods that differ only there must not share a resource shape)."""
    condition = b'{"type":"PodResize\\u0050ending","reason":"Infeasible"}'
    body = (
        b'{"metadata":{"resourceVersion":"7"},"items":['
        + b",".join(
            b'{"metadata":{"name":"p%d","namespace":"ns"},'
            b'"spec":{"nodeName":"n","containers":[{"name":"app","resources":'
            b'{"requests":{"cpu":"4"}}}]},"status":{"containerStatuses":[{"name":"app",'
            b'"\\u0072esources":{"requests":{"cpu":"2"}}}],"conditions":[%s]}}' % (i, extra)
            for i, extra in ((1, b""), (2, condition))
        )
        + b"]}"
    )
    by_dict, by_wire = ClusterState(), ClusterState()
    items = _codec(PODS).page(body).items
    assert all(isinstance(item, PodWire) for item in items)
    _feed(by_dict, PODS, orjson.loads(body)["items"])
    _feed(by_wire, PODS, items)
    assert _snapshot(by_wire) == _snapshot(by_dict)
    # Resizing down: 4 while feasible (the spec counts), 2 once infeasible (it does not).
    assert by_wire.pods[("ns", "p1")].requests["cpu"] == 4
    assert by_wire.pods[("ns", "p2")].requests["cpu"] == 2
