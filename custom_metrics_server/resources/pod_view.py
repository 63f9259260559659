"""A pod as the resource model reads it: the fields of the API server's JSON that upstream's
``PodRequests``/``PodLimits`` look at, parsed and validated once per call.

Owns reading, not arithmetic: every list is parsed into `Quantity` values with the JSON path
of a bad value in its error (`TypeError` for a wrong shape, `ValueError` for a bad
quantity), absent and null lists are Go's nil (None), and container statuses are found as
``findContainerStatus`` finds them. Pure: no I/O, no logging. Cost: O(containers x
resources) per view.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from custom_metrics_server.machinery.quantity import Quantity

__all__ = [
    "Container",
    "ContainerStatus",
    "Kind",
    "PodView",
    "ResourceMap",
    "json_object",
    "json_objects",
    "resize_infeasible",
    "resource_list",
]

ResourceMap = dict[str, Quantity]
_EMPTY: Final[Mapping[str, Any]] = {}


# --- JSON access ----------------------------------------------------------------------


def json_object(value: object, where: str) -> Mapping[str, Any]:
    """Return value as a JSON object; None (absent or null) is the empty object."""
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be an object, not {type(value).__name__}")
    return value


def json_objects(value: object, where: str) -> list[Mapping[str, Any]]:
    """Return value as a list of JSON objects; None (absent or null) is the empty list."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{where} must be an array, not {type(value).__name__}")
    return [json_object(item, f"{where}[{index}]") for index, item in enumerate(value)]


_parse_text: Callable[[str], Quantity] = functools.lru_cache(maxsize=4096)(Quantity.parse)


def _quantity(value: object, where: str) -> Quantity:
    """Parse one quantity of a resource list (a string, as the API server sends it)."""
    try:
        if isinstance(value, str):
            return _parse_text(value)
        if isinstance(value, bool):
            pass  # a JSON true/false is no quantity; falls through to the TypeError
        elif isinstance(value, int):
            return _parse_text(str(value))
        elif isinstance(value, float | Decimal):
            return Quantity.from_number(value)
    except ValueError as error:
        raise ValueError(f"{where}: {value!r}: {error}") from error
    raise TypeError(f"{where} must be a quantity string, not {type(value).__name__}")


def resource_list(value: object, where: str) -> ResourceMap | None:
    """Parse a ResourceList; None when absent or null (Go's nil map), else a new dict."""
    if value is None:
        return None
    return {
        str(name): _quantity(amount, f"{where}.{name}")
        for name, amount in json_object(value, where).items()
    }


# --- The pod, parsed once per call -----------------------------------------------------

Kind = Literal["requests", "limits"]


@dataclass(frozen=True, slots=True)
class Container:
    """One spec container: its name, whether it is a sidecar, and its spec list."""

    name: str
    restartable: bool
    spec: ResourceMap | None


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    """One container status: allocatedResources and resources.{requests|limits}."""

    allocated: ResourceMap | None
    actual: ResourceMap | None


@dataclass(frozen=True, slots=True)
class PodView:
    """The fields of a pod that PodRequests/PodLimits read, for one kind of list."""

    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...]
    statuses: Mapping[str, ContainerStatus]
    overhead: ResourceMap | None
    pod_requests: ResourceMap | None
    pod_limits: ResourceMap | None
    status_resources_set: bool
    status_actual: ResourceMap | None
    status_allocated: ResourceMap | None
    infeasible: bool

    @classmethod
    def of(cls, pod: Mapping[str, Any], kind: Kind) -> PodView:
        """Parse what the computation of kind needs from a pod's JSON."""
        pod = json_object(pod, "pod")
        spec = json_object(pod.get("spec"), "spec")
        status = json_object(pod.get("status"), "status")

        def containers(field: str) -> tuple[Container, ...]:
            parsed = []
            for index, container in enumerate(json_objects(spec.get(field), f"spec.{field}")):
                where = f"spec.{field}[{index}].resources"
                resources = json_object(container.get("resources"), where)
                parsed.append(
                    Container(
                        name=str(container.get("name", "")),
                        restartable=container.get("restartPolicy") == "Always",
                        spec=resource_list(resources.get(kind), f"{where}.{kind}"),
                    )
                )
            return tuple(parsed)

        statuses: dict[str, ContainerStatus] = {}
        # findContainerStatus: containerStatuses first, then initContainerStatuses.
        for field in ("containerStatuses", "initContainerStatuses"):
            for index, entry in enumerate(json_objects(status.get(field), f"status.{field}")):
                name = str(entry.get("name", ""))
                if name in statuses:
                    continue
                where = f"status.{field}[{index}]"
                actual = json_object(entry.get("resources"), f"{where}.resources").get(kind)
                statuses[name] = ContainerStatus(
                    allocated=resource_list(
                        entry.get("allocatedResources"), f"{where}.allocatedResources"
                    ),
                    actual=resource_list(actual, f"{where}.resources.{kind}"),
                )

        pod_resources = json_object(spec.get("resources"), "spec.resources")
        status_resources = status.get("resources")
        return cls(
            containers=containers("containers"),
            init_containers=containers("initContainers"),
            statuses=statuses,
            overhead=resource_list(spec.get("overhead"), "spec.overhead"),
            pod_requests=resource_list(pod_resources.get("requests"), "spec.resources.requests"),
            pod_limits=resource_list(pod_resources.get("limits"), "spec.resources.limits"),
            status_resources_set=status_resources is not None,
            status_actual=resource_list(
                json_object(status_resources, "status.resources").get(kind),
                f"status.resources.{kind}",
            ),
            status_allocated=resource_list(
                status.get("allocatedResources"), "status.allocatedResources"
            ),
            infeasible=resize_infeasible(status),
        )


def resize_infeasible(status: Mapping[str, Any]) -> bool:
    """IsPodResizeInfeasible: the first PodResizePending condition's reason is Infeasible.

    Without such a condition, the deprecated ``status.resize`` field (API servers up to
    1.32) is read instead.
    """
    for condition in json_objects(status.get("conditions"), "status.conditions"):
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return bool(status.get("resize") == "Infeasible")
