"""The lifecycle states KEP-1748 defines for a pod (Schedulable, Runnable, Completed) and the
``unit`` label kube-scheduler's ``kube_pod_resource_request`` metric gives each resource.

Pure: no I/O, no logging. Cost: O(containers) per pod, O(1) per unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from custom_metrics_server.resources.pod_view import json_object, json_objects

__all__ = ["RESOURCE_UNITS", "Lifecycle", "pod_lifecycle", "resource_unit"]

Lifecycle = Literal["Schedulable", "Runnable", "Completed"]

#: Unit label of kube-scheduler's kube_pod_resource_request/limit metric for the resources
#: it names exactly (pkg/scheduler/metrics/resources/resources.go). Prefixed names and every
#: other resource are handled by :func:`resource_unit`.
RESOURCE_UNITS: Final[dict[str, str]] = {
    "cpu": "cores",
    "memory": "bytes",
    "storage": "bytes",
    "ephemeral-storage": "bytes",
}

_HUGEPAGES_PREFIX: Final = "hugepages-"
_ATTACHABLE_VOLUMES_PREFIX: Final = "attachable-volumes-"
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def _terminated(status: Mapping[str, Any] | None) -> bool:
    """Whether a container status reports a termination state."""
    if status is None:
        return False
    state = json_object(status.get("state"), "containerStatus.state")
    return state.get("terminated") is not None


def _all_containers_stopped(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether every init and regular container has a status in a terminated state."""
    reported: dict[str, Mapping[str, Any]] = {}
    for field in ("initContainerStatuses", "containerStatuses"):
        for entry in json_objects(status.get(field), f"status.{field}"):
            reported.setdefault(str(entry.get("name", "")), entry)
    for field in ("initContainers", "containers"):
        for container in json_objects(spec.get(field), f"spec.{field}"):
            if not _terminated(reported.get(str(container.get("name", "")))):
                return False
    return True


def pod_lifecycle(pod: Mapping[str, Any]) -> Lifecycle:
    """Return the pod's KEP-1748 lifecycle state; O(containers).

    Completed: phase Succeeded or Failed, or deleted (``metadata.deletionTimestamp``) with
    every init and regular container reported terminated. Otherwise Schedulable until
    ``spec.nodeName`` is set, then Runnable.
    """
    if type(pod) is dict:  # decoded JSON, the usual pod: neither terminal nor deleted
        spec, status, metadata = pod.get("spec"), pod.get("status"), pod.get("metadata")
        if (
            type(spec) is dict
            and type(status) is dict
            and type(metadata) is dict
            and status.get("phase") not in _TERMINAL_PHASES
            and metadata.get("deletionTimestamp") is None
        ):
            return "Runnable" if spec.get("nodeName") else "Schedulable"
    pod = json_object(pod, "pod")
    spec = json_object(pod.get("spec"), "spec")
    status = json_object(pod.get("status"), "status")
    if status.get("phase") in _TERMINAL_PHASES:
        return "Completed"
    deleted = json_object(pod.get("metadata"), "metadata").get("deletionTimestamp") is not None
    if deleted and _all_containers_stopped(spec, status):
        return "Completed"
    if not spec.get("nodeName"):
        return "Schedulable"
    return "Runnable"


def resource_unit(name: str) -> str:
    """Return the scheduler metric's unit label for a resource name; O(1).

    cpu is ``cores``; memory, storage, ephemeral-storage and hugepages-* are ``bytes``;
    attachable-volumes-* are ``integer``; anything else (extended resources such as
    nvidia.com/gpu) has the empty unit, as in kube-scheduler and the KEP.
    """
    unit = RESOURCE_UNITS.get(name)
    if unit is not None:
        return unit
    if name.startswith(_HUGEPAGES_PREFIX):
        return "bytes"
    if name.startswith(_ATTACHABLE_VOLUMES_PREFIX):
        return "integer"
    return ""
