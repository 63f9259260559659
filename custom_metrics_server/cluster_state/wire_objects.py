"""Schema decoding of the watched collections: only the fields the records read.

This module owns the typed wire path of the Kubernetes backend's reflectors. A list page or
watch event is decoded by msgspec into small structs holding just what `records.ClusterState`
reads (metadata identity, labels and controller; a pod's node, scheduler, priority, lifecycle
fields and the resource model's inputs; a node's allocatable and addresses). Everything else
(managedFields, env, volumes, images, probes, annotations) is skipped inside the decoder
without building Python objects, a third of the cost of a full decode (docs/performance.md,
"Schema decoding of watched objects"). The structs are not tracked by the cyclic GC.

Fidelity: the resource model's inputs (container, overhead and pod-level `resources`, the
container statuses' resize fields, the pod-level resize status and the conditions) and the
container states are kept as `msgspec.Raw` byte slices: the resource-shape key is built from
those bytes, and on a shape-memo miss `model_pod` decodes them into the dict the model reads
on the dict path (as `orjson.loads` decodes them); a deleted pod's lifecycle is decided by
`lifecycle.pod_lifecycle` itself on the same kind of dict. Every other field is typed as the
records read it, nulls included; a page or event with a field of another JSON type is
decoded again as plain dicts (`orjson`), so its objects take the dict path and behave as
before. Costs: a page is one decode, O(bytes); the helpers below are O(containers).
"""

from __future__ import annotations

from typing import Any, Final, Generic, TypeVar

import msgspec
import orjson

from custom_metrics_server.kube.wire_codec import (
    VERSIONED_EVENTS,
    ListPage,
    WatchEvent,
    dict_event,
    dict_page,
)
from custom_metrics_server.resources.lifecycle import pod_lifecycle

__all__ = [
    "NodeWire",
    "ObjectWire",
    "PodWire",
    "WireCodec",
    "model_pod",
    "pod_shape",
    "wire_controller",
    "wire_lifecycle",
]

_ABSENT: Final = msgspec.Raw(b"")  # an absent field (a present null is b"null")
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


class OwnerWire(msgspec.Struct, gc=False, rename="camel"):
    """One ownerReference (`record_inputs.controller_of` reads these three)."""

    kind: str | None = ""
    name: str | None = ""
    controller: bool | None = None


class MetaWire(msgspec.Struct, gc=False, rename="camel"):
    """ObjectMeta as the records read it."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    owner_references: list[OwnerWire] | None = None
    deletion_timestamp: str | None = None
    resource_version: str | None = None


class ObjectWire(msgspec.Struct, gc=False, rename="camel"):
    """Any watched object: its metadata only (namespaces and workloads)."""

    metadata: MetaWire | None = None


class AddressWire(msgspec.Struct, gc=False, rename="camel"):
    """One node address."""

    type: str | None = None
    address: Any = ""


class ConditionWire(msgspec.Struct, gc=False, rename="camel"):
    """A node condition: only the Ready one is read (the scraper tries a node that turned
    Ready at once)."""

    type: str | None = None
    status: str | None = None


class NodeStatusWire(msgspec.Struct, gc=False, rename="camel"):
    """What `_apply_node` reads of a node's status."""

    allocatable: dict[str, Any] | None = None
    addresses: list[AddressWire] | None = None
    conditions: list[ConditionWire] | None = None


class NodeWire(ObjectWire, gc=False):
    """A node: metadata, allocatable and addresses."""

    status: NodeStatusWire | None = None


class ContainerWire(msgspec.Struct, gc=False, rename="camel"):
    """A spec container: what the resource model and the lifecycle read."""

    name: str | None = ""
    restart_policy: str | None = None
    resources: msgspec.Raw = _ABSENT


class ContainerStatusWire(msgspec.Struct, gc=False, rename="camel"):
    """A container status: its resize-related fields, and its state (read once deleted)."""

    name: str | None = ""
    allocated_resources: msgspec.Raw = _ABSENT
    resources: msgspec.Raw = _ABSENT
    state: msgspec.Raw = _ABSENT


class PodSpecWire(msgspec.Struct, gc=False, rename="camel"):
    """What the records and the resource model read of a pod's spec."""

    node_name: str | None = None
    scheduler_name: str | None = None
    priority: int | None = None
    containers: list[ContainerWire] | None = None
    init_containers: list[ContainerWire] | None = None
    overhead: msgspec.Raw = _ABSENT
    resources: msgspec.Raw = _ABSENT


class PodStatusWire(msgspec.Struct, gc=False, rename="camel"):
    """What the lifecycle and the resource model read of a pod's status. The conditions stay
    bytes: only a PodResizePending one matters (see `pod_shape`)."""

    phase: str | None = None
    container_statuses: list[ContainerStatusWire] | None = None
    init_container_statuses: list[ContainerStatusWire] | None = None
    conditions: msgspec.Raw = _ABSENT
    resources: msgspec.Raw = _ABSENT
    allocated_resources: msgspec.Raw = _ABSENT
    resize: msgspec.Raw = _ABSENT


class PodWire(ObjectWire, gc=False):
    """A pod: metadata, and the spec and status fields read."""

    spec: PodSpecWire | None = None
    status: PodStatusWire | None = None


class _ListMeta(msgspec.Struct, gc=False, rename="camel"):
    resource_version: str | None = None
    continue_: str | None = msgspec.field(default=None, name="continue")


_T = TypeVar("_T", bound=ObjectWire)


class _Page(msgspec.Struct, Generic[_T], gc=False, rename="camel"):
    metadata: _ListMeta | None = None
    items: list[_T] | None = None


class _Event(msgspec.Struct, Generic[_T], gc=False, rename="camel"):
    type: str
    object: _T


class WireCodec(Generic[_T]):
    """A `wire_codec.WireCodec` decoding one kind of object into `ObjectWire` structs."""

    def __init__(self, item: type[_T]) -> None:
        self._page: msgspec.json.Decoder[_Page[_T]] = msgspec.json.Decoder(
            _Page[item]  # type: ignore[valid-type]
        )
        self._event: msgspec.json.Decoder[_Event[_T]] = msgspec.json.Decoder(
            _Event[item]  # type: ignore[valid-type]
        )

    def page(self, body: bytes) -> ListPage:
        """One list page; an object of another shape sends the whole page the dict way."""
        try:
            page = self._page.decode(body)
        except msgspec.ValidationError:
            return dict_page(orjson.loads(body))
        except msgspec.DecodeError as err:
            raise ValueError(str(err)) from err
        if page.metadata is None:
            raise ValueError("the list has no metadata")
        return ListPage(
            page.items or [], page.metadata.resource_version or "", page.metadata.continue_ or ""
        )

    def event(self, line: bytes | str) -> WatchEvent:
        """One watch event; ERROR (a Status) and unknown types, or an object of another
        shape, are decoded as dicts."""
        try:
            event = self._event.decode(line)
        except msgspec.ValidationError:
            return dict_event(orjson.loads(line))
        except msgspec.DecodeError as err:
            raise ValueError(str(err)) from err
        if event.type not in VERSIONED_EVENTS:
            return dict_event(orjson.loads(line))
        metadata = event.object.metadata
        if metadata is None or metadata.resource_version is None:
            raise ValueError("a watch event's object has no metadata.resourceVersion")
        return WatchEvent(event.type, event.object, metadata.resource_version)


# --- what the records read -------------------------------------------------------------------


def wire_controller(metadata: MetaWire) -> tuple[str, str] | None:
    """The controller (kind, name), as `record_inputs.controller_of` finds it in the dict."""
    for ref in metadata.owner_references or ():
        if ref.controller:
            return (str(ref.kind), str(ref.name))
    return None


def _loads(raw: msgspec.Raw) -> Any:
    """A kept field as `orjson.loads` decodes it on the dict path (absent: None)."""
    return orjson.loads(bytes(raw)) if raw else None


def wire_lifecycle(pod: PodWire) -> str:
    """`lifecycle.pod_lifecycle` of the decoded pod; O(1), or O(containers) once deleted
    (the pod's lifecycle fields are then decoded into the dict that function reads)."""
    spec, status, metadata = pod.spec, pod.status, pod.metadata
    if status is not None and status.phase in _TERMINAL_PHASES:
        return "Completed"
    if metadata is None or metadata.deletion_timestamp is None:
        return "Runnable" if spec is not None and spec.node_name else "Schedulable"
    found: dict[str, Any] = {"metadata": {"deletionTimestamp": metadata.deletion_timestamp}}
    if spec is not None:
        found["spec"] = {
            "nodeName": spec.node_name,
            "containers": _container_names(spec.containers),
            "initContainers": _container_names(spec.init_containers),
        }
    if status is not None:
        found["status"] = {
            "phase": status.phase,
            "containerStatuses": _states(status.container_statuses),
            "initContainerStatuses": _states(status.init_container_statuses),
        }
    return pod_lifecycle(found)


def _container_names(containers: list[ContainerWire] | None) -> list[dict[str, Any]] | None:
    return None if containers is None else [{"name": c.name} for c in containers]


def _states(statuses: list[ContainerStatusWire] | None) -> list[dict[str, Any]] | None:
    if statuses is None:
        return None
    return [{"name": c.name, "state": _loads(c.state)} for c in statuses]


def _mentions(raw: msgspec.Raw, name: bytes) -> bool:
    """Whether a kept field may hold this name (any escape counts: the exact check decodes
    the field). O(bytes), in C."""
    if not raw:
        return False
    text = bytes(raw)
    return b"\\" in text or name in text


def pod_shape(pod: PodWire) -> tuple[Any, ...]:
    """The resource model's inputs as one hashable key (the raw bytes of each resource list,
    as `resource_shapes._resource_shape` is of the dict's fields); O(containers). The
    conditions are only searched for PodResizePending (the usual pod: nothing decoded).
    Raises TypeError or AttributeError on conditions of another JSON type, as the dict path
    does."""
    spec, status = pod.spec, pod.status
    parts: list[Any] = []
    append = parts.append
    if spec is not None:
        for c in spec.containers or ():
            append(c.name)
            append(c.restart_policy)
            append(bytes(c.resources))
        append(1)  # separators: the lists' lengths vary
        for c in spec.init_containers or ():
            append(c.name)
            append(c.restart_policy)
            append(bytes(c.resources))
        append(2)
        append(bytes(spec.overhead))
        append(bytes(spec.resources))
    if status is not None:
        append(3)
        for field, entries in (
            ("c", status.container_statuses),
            ("i", status.init_container_statuses),
        ):
            for e in entries or ():
                if e.allocated_resources or e.resources:  # the usual status has neither
                    append((field, e.name, bytes(e.allocated_resources), bytes(e.resources)))
        append(bytes(status.resources))
        append(bytes(status.allocated_resources))
        append(bytes(status.resize))
        if _mentions(status.conditions, b"PodResizePending"):
            append(
                orjson.dumps(
                    [
                        ("PodResizePending", c.get("reason"))
                        for c in _loads(status.conditions) or ()
                        if c.get("type") == "PodResizePending"
                    ]
                )
            )
    return tuple(parts)


def _put(target: dict[str, Any], field: str, value: msgspec.Raw) -> None:
    if value:  # absent stays absent; a present null is None, as orjson decodes it
        target[field] = orjson.loads(bytes(value))


def model_pod(pod: PodWire) -> dict[str, Any]:
    """The pod as the resource model reads it: the dict of its model fields, decoded from
    the kept bytes as `orjson.loads` decodes them on the dict path. O(containers)."""
    found: dict[str, Any] = {}
    spec, status = pod.spec, pod.status
    if spec is not None:
        found["spec"] = out = {}
        for field, containers in (
            ("containers", spec.containers),
            ("initContainers", spec.init_containers),
        ):
            if containers is not None:
                out[field] = [_container(c) for c in containers]
        _put(out, "overhead", spec.overhead)
        _put(out, "resources", spec.resources)
    if status is not None:
        state: dict[str, Any] = {}
        found["status"] = state
        for field, entries in (
            ("containerStatuses", status.container_statuses),
            ("initContainerStatuses", status.init_container_statuses),
        ):
            if entries is not None:
                state[field] = [_status(c) for c in entries]
        _put(state, "conditions", status.conditions)
        _put(state, "resources", status.resources)
        _put(state, "allocatedResources", status.allocated_resources)
        _put(state, "resize", status.resize)
    return found


def _container(container: ContainerWire) -> dict[str, Any]:
    found: dict[str, Any] = {"name": container.name, "restartPolicy": container.restart_policy}
    _put(found, "resources", container.resources)
    return found


def _status(status: ContainerStatusWire) -> dict[str, Any]:
    found: dict[str, Any] = {"name": status.name}
    _put(found, "allocatedResources", status.allocated_resources)
    _put(found, "resources", status.resources)
    return found
