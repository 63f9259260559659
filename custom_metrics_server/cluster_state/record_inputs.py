"""What `records.ClusterState` reads of an object, from either form it arrives in: the dict
of a generic decode (`orjson`, the demo, tests) or the structs of the schema decoders
(`wire_objects`, the Kubernetes backend's reflectors). One function per question, each
answering identically for both forms of the same JSON (the differential tests hold them to
it). Pure; O(1) each except the lifecycle (O(containers)) and the controller (O(owners)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from custom_metrics_server.cluster_state.wire_objects import (
    NodeWire,
    ObjectWire,
    PodWire,
    wire_controller,
    wire_lifecycle,
)
from custom_metrics_server.resources.lifecycle import pod_lifecycle

__all__ = ["Object", "controller_of", "deleted_key", "identity", "node_inputs", "pod_inputs"]

#: An API object as the watch sinks receive it.
Object = Mapping[str, Any] | ObjectWire


#: An object's name, namespace, labels and controller (kind, name), as found.
Identity = tuple[Any, Any, "Mapping[str, str] | None", "tuple[str, str] | None"]


def controller_of(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (kind, name) of the ownerReference marked `controller`, in a metadata dict."""
    for ref in metadata.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return (str(ref.get("kind", "")), str(ref.get("name", "")))
    return None


def identity(obj: Object) -> Identity:
    """The metadata the records keep of every object."""
    if isinstance(obj, ObjectWire):
        meta = obj.metadata
        if meta is None:
            return (None, None, None, None)
        return (meta.name, meta.namespace, meta.labels, wire_controller(meta))
    metadata = obj.get("metadata") or {}
    return (
        metadata.get("name"),
        metadata.get("namespace"),
        metadata.get("labels"),
        controller_of(metadata),
    )


def deleted_key(obj: Object) -> tuple[str, str]:
    """The (namespace, name) a DELETED event names (absent fields as the dict path reads
    them: "" for a missing namespace or name)."""
    if isinstance(obj, ObjectWire):
        meta = obj.metadata
        if meta is None:
            return ("", "")
        return (meta.namespace or "", meta.name or "")
    metadata = obj.get("metadata") or {}
    return (metadata.get("namespace", ""), metadata.get("name", ""))


def pod_inputs(pod: Object) -> tuple[Any, Any, Any, str]:
    """A pod's spec.nodeName, spec.schedulerName and spec.priority (None when absent) and its
    lifecycle (`lifecycle.pod_lifecycle`)."""
    if isinstance(pod, PodWire):
        wire = pod.spec
        if wire is None:
            return None, None, None, wire_lifecycle(pod)
        return wire.node_name, wire.scheduler_name, wire.priority, wire_lifecycle(pod)
    found = cast("Mapping[str, Any]", pod)
    spec = found.get("spec") or {}
    return (
        spec.get("nodeName"),
        spec.get("schedulerName"),
        spec.get("priority"),
        pod_lifecycle(found),
    )


def node_inputs(node: Object) -> tuple[Mapping[str, Any] | None, Any]:
    """A node's status.allocatable and its first InternalIP address ("" if none)."""
    if isinstance(node, NodeWire):
        status = node.status
        if status is None:
            return None, ""
        return status.allocatable, next(
            (a.address for a in status.addresses or () if a.type == "InternalIP"), ""
        )
    found = cast("Mapping[str, Any]", node).get("status") or {}
    address = next(
        (
            a.get("address", "")
            for a in found.get("addresses") or ()
            if a.get("type") == "InternalIP"
        ),
        "",
    )
    return found.get("allocatable"), address
