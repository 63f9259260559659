"""The Kubernetes pod resource model of KEP-1748: effective requests, limits and lifecycle.

This module owns the answer to "how much of each resource does this pod hold, and is it
holding it at all": a Python port of ``k8s.io/component-helpers/resource``
``PodRequests``/``PodLimits`` (sidecar-aware init-container maths, pod overhead, pod-level
``spec.resources``, in-place resize) applied to a Pod as the API server's JSON returns it,
the lifecycle states the KEP defines (Schedulable, Runnable, Completed) and the ``unit``
label kube-scheduler's ``kube_pod_resource_request`` metric gives each resource.

It is a pure module: no I/O, no logging, no clocks; the only dependency is our own
:mod:`custom_metrics_server.machinery.quantity`. Results are fresh dicts the caller may keep.

Upstream reference: ``k8s.io/component-helpers`` at commit 1961876b (2026-07-24), read as
kubernetes/kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``. At that
commit the pod-level status branch reads ``status.resources`` only when it is set (the
``InPlacePodLevelResourcesVerticalScalingEnabled`` and ``UseStatusResources`` options both on)
and adds ``spec.overhead`` to whatever wins, so a kubelet that reports pod-level status
*including* the overhead has it counted twice (kubernetes/kubernetes#139627; the fix,
#140481, was still open then). This port keeps that behaviour: it agrees with upstream.
``IsSupportedPodLevelResource`` at that commit: ``cpu``, ``memory`` and every
``hugepages-*``.

Which upstream options are applied (:data:`DEFAULT_OPTIONS`) is the scheduler's own choice
with default feature gates (kube-scheduler's NodeInfo accounting, not the literal
``PodResourcesOptions{}``): ``UseStatusResources`` (InPlacePodVerticalScaling, GA in 1.35),
``InPlacePodLevelResourcesVerticalScalingEnabled`` (beta, on by default from 1.36; it only
reads ``status.resources``/``status.allocatedResources``, which are absent unless the
cluster runs the feature) and pod-level resources honoured (PodLevelResources, beta and on
since 1.34). :data:`SCHEDULER_METRIC_OPTIONS` is exactly what kube-scheduler's
``/metrics/resources`` collector passes (``PodResourcesOptions{}``: spec only, no status).
:func:`hpa_pod_requests` is the request the HorizontalPodAutoscaler divides usage by
(``pkg/controller/podautoscaler/replica_calculator.go`` ``calculateRequests``).

Deliberate differences from upstream, each for the reason given:

* Zero quantities are left out of every result. Upstream's ResourceList keeps explicit
  zeros (``cpu: "0"``); the KEP and the scheduler's collector report no series for a zero
  value, and this server serves those series.
* An in-place resize is also treated as infeasible when the pod carries no
  ``PodResizePending`` condition but the deprecated ``status.resize`` says
  ``Infeasible``: that is how API servers up to 1.32 report it (upstream's 1.32 helper
  read that field; current upstream reads only the condition, and API servers from 1.33 on
  no longer write the field, so the two agree on every pod they return).
* Node-allocatable DRA claims (``UseDRANodeAllocatableResourceClaimStatus``, alpha, off by
  default), ``NonMissingContainerRequests`` (scheduler scoring only), ``Reuse`` and
  ``SkipContainerLevelResources`` are not ported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from custom_metrics_server.machinery.quantity import Quantity

__all__ = [
    "DEFAULT_OPTIONS",
    "HPA_POD_LEVEL_OPTIONS",
    "RESOURCE_UNITS",
    "SCHEDULER_METRIC_OPTIONS",
    "Lifecycle",
    "ResourceOptions",
    "hpa_pod_requests",
    "is_supported_pod_level_resource",
    "pod_lifecycle",
    "pod_limits",
    "pod_requests",
    "resource_unit",
]

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
# supportedPodLevelResources upstream, plus any hugepages-* (IsSupportedPodLevelResource at
# 1961876b; releases up to 1.33 accepted cpu and memory only).
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})
_TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})
_ZERO: Final = Decimal(0)
_EMPTY: Final[Mapping[str, Any]] = {}

ResourceMap = dict[str, Quantity]


@dataclass(frozen=True, slots=True)
class ResourceOptions:
    """The subset of upstream ``PodResourcesOptions`` this port honours.

    Field by field: ``use_status_resources`` is ``UseStatusResources``,
    ``pod_level_status_resources`` is ``InPlacePodLevelResourcesVerticalScalingEnabled``,
    ``skip_pod_level_resources`` is ``SkipPodLevelResources`` and ``exclude_overhead`` is
    ``ExcludeOverhead``. The defaults are the scheduler's with default feature gates.
    """

    use_status_resources: bool = True
    pod_level_status_resources: bool = True
    skip_pod_level_resources: bool = False
    exclude_overhead: bool = False


#: What kube-scheduler's accounting uses with default feature gates (see the module doc).
DEFAULT_OPTIONS: Final = ResourceOptions()
#: Exactly ``PodResourcesOptions{}``, as passed by the scheduler's /metrics/resources collector.
SCHEDULER_METRIC_OPTIONS: Final = ResourceOptions(
    use_status_resources=False, pod_level_status_resources=False
)
#: What the HPA passes for a pod with pod-level requests (``calculatePodLevelRequests``:
#: ``PodResourcesOptions{ExcludeOverhead: true}`` since kubernetes/kubernetes#142154).
HPA_POD_LEVEL_OPTIONS: Final = ResourceOptions(
    use_status_resources=False, pod_level_status_resources=False, exclude_overhead=True
)


# --- JSON access ----------------------------------------------------------------------


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    """Return value as a JSON object; None (absent or null) is the empty object."""
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be an object, not {type(value).__name__}")
    return value


def _objects(value: object, where: str) -> list[Mapping[str, Any]]:
    """Return value as a list of JSON objects; None (absent or null) is the empty list."""
    if value is None:
        return []
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{where} must be an array, not {type(value).__name__}")
    return [_mapping(item, f"{where}[{index}]") for index, item in enumerate(value)]


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


def _resource_list(value: object, where: str) -> ResourceMap | None:
    """Parse a ResourceList; None when absent or null (Go's nil map), else a new dict."""
    if value is None:
        return None
    return {
        str(name): _quantity(amount, f"{where}.{name}")
        for name, amount in _mapping(value, where).items()
    }


# --- ResourceList arithmetic (addResourceList, maxResourceList, max, subtract) ---------------


def _add_into(target: ResourceMap, extra: Mapping[str, Quantity] | None) -> None:
    """Add every quantity of extra to target (addResourceList)."""
    if extra:
        for name, amount in extra.items():
            current = target.get(name)
            target[name] = amount if current is None else current + amount


def _max_into(target: ResourceMap, extra: Mapping[str, Quantity] | None) -> None:
    """Raise each resource of target to extra's where extra's is larger or new (maxResourceList)."""
    if extra:
        for name, amount in extra.items():
            current = target.get(name)
            if current is None or amount > current:
                target[name] = amount


def _max_of(
    first: Mapping[str, Quantity] | None, *others: Mapping[str, Quantity] | None
) -> ResourceMap:
    """Return the per-resource maximum of the lists, a new dict (upstream's max)."""
    result = dict(first) if first else {}
    for other in others:
        _max_into(result, other)
    return result


def _without_zeros(resources: ResourceMap) -> dict[str, Quantity]:
    """Drop zero quantities: the KEP reports no series for a zero value."""
    return {name: amount for name, amount in resources.items() if not amount.is_zero()}


# --- The pod, parsed once per call -----------------------------------------------------

_Kind = Literal["requests", "limits"]


@dataclass(frozen=True, slots=True)
class _Container:
    """One spec container: its name, whether it is a sidecar, and its spec list."""

    name: str
    restartable: bool
    spec: ResourceMap | None


@dataclass(frozen=True, slots=True)
class _Status:
    """One container status: allocatedResources and resources.{requests|limits}."""

    allocated: ResourceMap | None
    actual: ResourceMap | None


@dataclass(frozen=True, slots=True)
class _PodView:
    """The fields of a pod that PodRequests/PodLimits read, for one kind of list."""

    containers: tuple[_Container, ...]
    init_containers: tuple[_Container, ...]
    statuses: Mapping[str, _Status]
    overhead: ResourceMap | None
    pod_requests: ResourceMap | None
    pod_limits: ResourceMap | None
    status_resources_set: bool
    status_actual: ResourceMap | None
    status_allocated: ResourceMap | None
    infeasible: bool

    @classmethod
    def of(cls, pod: Mapping[str, Any], kind: _Kind) -> _PodView:
        """Parse what the computation of kind needs from a pod's JSON."""
        pod = _mapping(pod, "pod")
        spec = _mapping(pod.get("spec"), "spec")
        status = _mapping(pod.get("status"), "status")

        def containers(field: str) -> tuple[_Container, ...]:
            parsed = []
            for index, container in enumerate(_objects(spec.get(field), f"spec.{field}")):
                where = f"spec.{field}[{index}].resources"
                resources = _mapping(container.get("resources"), where)
                parsed.append(
                    _Container(
                        name=str(container.get("name", "")),
                        restartable=container.get("restartPolicy") == "Always",
                        spec=_resource_list(resources.get(kind), f"{where}.{kind}"),
                    )
                )
            return tuple(parsed)

        statuses: dict[str, _Status] = {}
        # findContainerStatus: containerStatuses first, then initContainerStatuses.
        for field in ("containerStatuses", "initContainerStatuses"):
            for index, entry in enumerate(_objects(status.get(field), f"status.{field}")):
                name = str(entry.get("name", ""))
                if name in statuses:
                    continue
                where = f"status.{field}[{index}]"
                actual = _mapping(entry.get("resources"), f"{where}.resources").get(kind)
                statuses[name] = _Status(
                    allocated=_resource_list(
                        entry.get("allocatedResources"), f"{where}.allocatedResources"
                    ),
                    actual=_resource_list(actual, f"{where}.resources.{kind}"),
                )

        pod_resources = _mapping(spec.get("resources"), "spec.resources")
        status_resources = status.get("resources")
        return cls(
            containers=containers("containers"),
            init_containers=containers("initContainers"),
            statuses=statuses,
            overhead=_resource_list(spec.get("overhead"), "spec.overhead"),
            pod_requests=_resource_list(pod_resources.get("requests"), "spec.resources.requests"),
            pod_limits=_resource_list(pod_resources.get("limits"), "spec.resources.limits"),
            status_resources_set=status_resources is not None,
            status_actual=_resource_list(
                _mapping(status_resources, "status.resources").get(kind), f"status.resources.{kind}"
            ),
            status_allocated=_resource_list(
                status.get("allocatedResources"), "status.allocatedResources"
            ),
            infeasible=_resize_infeasible(status),
        )


def _resize_infeasible(status: Mapping[str, Any]) -> bool:
    """IsPodResizeInfeasible: the first PodResizePending condition's reason is Infeasible.

    Without such a condition, the deprecated ``status.resize`` field (API servers up to
    1.32) is read instead.
    """
    for condition in _objects(status.get("conditions"), "status.conditions"):
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return bool(status.get("resize") == "Infeasible")


def is_supported_pod_level_resource(name: str) -> bool:
    """IsSupportedPodLevelResource at 1961876b: cpu, memory and hugepages-*; O(1)."""
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _names_supported(resources: Mapping[str, Quantity] | None) -> bool:
    """Whether a pod-level list names at least one supported resource."""
    return any(is_supported_pod_level_resource(name) for name in resources or ())


# --- Per-container list selection (containerSpecRequests and friends) --------------------

_Getter = Callable[[_Container, _Status | None, bool], ResourceMap | None]


def _spec_list(
    container: _Container, _status: _Status | None, _infeasible: bool
) -> ResourceMap | None:
    """containerSpecRequests / containerSpecLimits."""
    return container.spec


def _allocated_requests(
    container: _Container, status: _Status | None, infeasible: bool
) -> ResourceMap | None:
    """containerAllocatedRequests: allocatedResources, else spec unless the resize is infeasible."""
    if status is not None and status.allocated is not None:
        return status.allocated
    return None if infeasible else container.spec


def _actuated_requests(
    container: _Container, status: _Status | None, infeasible: bool
) -> ResourceMap | None:
    """containerActuatedRequests: resources.requests, else allocatedResources, else spec."""
    if status is not None:
        if status.actual is not None:
            return status.actual
        if status.allocated is not None:
            return status.allocated
    return None if infeasible else container.spec


def _actuated_limits(
    container: _Container, status: _Status | None, infeasible: bool
) -> ResourceMap | None:
    """containerActuatedLimits: resources.limits, else spec unless the resize is infeasible."""
    if status is not None and status.actual is not None:
        return status.actual
    return None if infeasible else container.spec


def _aggregate(view: _PodView, getter: _Getter, use_status: bool) -> ResourceMap:
    """aggregateContainerResourcesByFn: max(sum of containers and sidecars, peak init phase).

    Init container i needs its own list plus every restartable (sidecar) init container
    started before it; sidecars also run beside the regular containers.
    """
    infeasible = use_status and view.infeasible
    result: ResourceMap = {}
    for container in view.containers:
        status = view.statuses.get(container.name) if use_status else None
        _add_into(result, getter(container, status, infeasible))

    sidecars: ResourceMap = {}
    init_peak: ResourceMap = {}
    for container in view.init_containers:
        status = view.statuses.get(container.name) if use_status else None
        own = getter(container, status, infeasible)
        if container.restartable:
            _add_into(result, own)
            _add_into(sidecars, own)
            phase = sidecars
        else:
            phase = {}
            _add_into(phase, own)
            _add_into(phase, sidecars)
        _max_into(init_peak, phase)
    _max_into(result, init_peak)
    return result


# --- PodRequests ----------------------------------------------------------------------


def _aggregate_requests(view: _PodView, options: ResourceOptions) -> ResourceMap:
    """AggregateContainerRequests: spec, or max(spec, actuated, allocated) while resizing."""
    if not options.use_status_resources:
        return _aggregate(view, _spec_list, use_status=False)
    spec = _aggregate(view, _spec_list, use_status=True)
    if (
        options.pod_level_status_resources
        and view.status_allocated is not None
        and view.status_actual is not None
    ):
        # Pod-level status maps already hold the aggregate over all containers.
        allocated: ResourceMap = view.status_allocated
        actuated: ResourceMap = view.status_actual
    else:
        allocated = _aggregate(view, _allocated_requests, use_status=True)
        actuated = _aggregate(view, _actuated_requests, use_status=True)
    if view.infeasible:
        return _max_of(actuated, allocated)
    return _max_of(spec, actuated, allocated)


def _effective_pod_level(
    view: _PodView, spec: ResourceMap | None, *statuses: ResourceMap | None
) -> ResourceMap:
    """effectivePodLevelResources: max(spec, statuses...), spec ignored if resize is infeasible."""
    return _max_of(None if view.infeasible else spec, *statuses)


def _apply_pod_level(result: ResourceMap, effective: Mapping[str, Quantity] | None) -> None:
    """applyPodLevelResources: pod-level values replace the aggregate for supported names."""
    for name, amount in (effective or {}).items():
        if is_supported_pod_level_resource(name):
            result[name] = amount


def _requests(view: _PodView, options: ResourceOptions) -> ResourceMap:
    """PodRequests over a parsed pod, zero values kept (the caller drops them)."""
    requests = _aggregate_requests(view, options)

    if not options.skip_pod_level_resources and _names_supported(view.pod_requests):
        effective = view.pod_requests
        if (
            options.pod_level_status_resources
            and options.use_status_resources
            and view.status_resources_set
        ):
            # status.resources.requests and status.allocatedResources as the kubelet reports
            # them; the overhead below is added on top (upstream at 1961876b, see module doc).
            effective = _effective_pod_level(
                view, view.pod_requests, view.status_actual, view.status_allocated
            )
        _apply_pod_level(requests, effective)

    if not options.exclude_overhead:
        _add_into(requests, view.overhead)
    return requests


def pod_requests(
    pod: Mapping[str, Any], *, options: ResourceOptions = DEFAULT_OPTIONS
) -> dict[str, Quantity]:
    """Return the pod's effective requests, as upstream PodRequests; O(containers x resources)."""
    return _without_zeros(_requests(_PodView.of(pod, "requests"), options))


def hpa_pod_requests(pod: Mapping[str, Any]) -> dict[str, Quantity]:
    """Return the request per resource the HPA divides a pod's usage by; O(containers x resources).

    ``calculateRequests`` of the HPA's replica calculator with no container named and the
    PodLevelResources gate on: a pod with a supported pod-level request is counted by
    PodRequests with ``ExcludeOverhead`` (spec only, init containers included); any other
    pod by the sum over its regular and restartable (sidecar) init containers of their spec
    requests, without init containers, overhead or resize status. A resource some of those
    containers do not request has no value: the HPA refuses to compute it ("missing request
    for cpu in container ..."). Each container's (or the pod's) quantity is rounded up to a
    milli-unit first, as the HPA's ``MilliValue`` does. Zero values are left out.
    """
    view = _PodView.of(pod, "requests")
    if _names_supported(view.pod_requests):
        totals = {
            name: amount.milli_value()
            for name, amount in _requests(view, HPA_POD_LEVEL_OPTIONS).items()
        }
    else:
        counted = [c.spec for c in view.containers] + [
            c.spec for c in view.init_containers if c.restartable
        ]
        names = set(counted[0] or ()) if counted else set()
        for spec in counted[1:]:
            names.intersection_update(spec or ())
        totals = {name: sum(spec[name].milli_value() for spec in counted if spec) for name in names}
    return {name: Quantity(Decimal(milli).scaleb(-3)) for name, milli in totals.items() if milli}


# --- PodLimits ------------------------------------------------------------------------


def _aggregate_limits(view: _PodView, options: ResourceOptions) -> ResourceMap:
    """AggregateContainerLimits: spec, or max(spec, actuated) while resizing."""
    if not options.use_status_resources:
        return _aggregate(view, _spec_list, use_status=False)
    spec = _aggregate(view, _spec_list, use_status=True)
    if options.pod_level_status_resources and view.status_actual is not None:
        actuated: ResourceMap = view.status_actual
    else:
        actuated = _aggregate(view, _actuated_limits, use_status=True)
    if view.infeasible:
        return dict(actuated)
    return _max_of(spec, actuated)


def pod_limits(
    pod: Mapping[str, Any], *, options: ResourceOptions = DEFAULT_OPTIONS
) -> dict[str, Quantity]:
    """Return the pod's effective limits, as upstream PodLimits; O(containers x resources)."""
    view = _PodView.of(pod, "limits")
    limits = _aggregate_limits(view, options)

    pod_level_set = _names_supported(view.pod_requests) or _names_supported(view.pod_limits)
    if not options.skip_pod_level_resources and pod_level_set:
        effective = view.pod_limits
        if (
            options.pod_level_status_resources
            and options.use_status_resources
            and view.status_resources_set
        ):
            effective = _effective_pod_level(view, view.pod_limits, view.status_actual)
        _apply_pod_level(limits, effective)

    # Overhead is added only to limits that are set and non-zero (unset means unlimited).
    if not options.exclude_overhead and view.overhead:
        for name, amount in view.overhead.items():
            current = limits.get(name)
            if current is not None and not current.is_zero():
                limits[name] = current + amount
    return _without_zeros(limits)


# --- Lifecycle and units -------------------------------------------------------------------


def _terminated(status: Mapping[str, Any] | None) -> bool:
    """Whether a container status reports a termination state."""
    if status is None:
        return False
    state = _mapping(status.get("state"), "containerStatus.state")
    return state.get("terminated") is not None


def _all_containers_stopped(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether every init and regular container has a status in a terminated state."""
    reported: dict[str, Mapping[str, Any]] = {}
    for field in ("initContainerStatuses", "containerStatuses"):
        for entry in _objects(status.get(field), f"status.{field}"):
            reported.setdefault(str(entry.get("name", "")), entry)
    for field in ("initContainers", "containers"):
        for container in _objects(spec.get(field), f"spec.{field}"):
            if not _terminated(reported.get(str(container.get("name", "")))):
                return False
    return True


def pod_lifecycle(pod: Mapping[str, Any]) -> Lifecycle:
    """Return the pod's KEP-1748 lifecycle state; O(containers).

    Completed: phase Succeeded or Failed, or deleted (``metadata.deletionTimestamp``) with
    every init and regular container reported terminated. Otherwise Schedulable until
    ``spec.nodeName`` is set, then Runnable.
    """
    pod = _mapping(pod, "pod")
    spec = _mapping(pod.get("spec"), "spec")
    status = _mapping(pod.get("status"), "status")
    if status.get("phase") in _TERMINAL_PHASES:
        return "Completed"
    deleted = _mapping(pod.get("metadata"), "metadata").get("deletionTimestamp") is not None
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
