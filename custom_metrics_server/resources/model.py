"""The Kubernetes pod resource model of KEP-1748: effective requests and limits.

This module owns the answer to "how much of each resource does this pod hold": a Python port
of ``k8s.io/component-helpers/resource`` ``PodRequests``/``PodLimits`` (sidecar-aware
init-container maths, pod overhead, pod-level ``spec.resources``, in-place resize) applied to
a Pod as the API server's JSON returns it (read by :mod:`.pod_view`). Whether the pod holds
it at all (its lifecycle) and the unit labels are :mod:`.lifecycle`'s.

It is a pure module: no I/O, no logging, no clocks. Results are fresh dicts the caller may
keep. Cost: O(containers x resources) per call.

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.resources.pod_view import (
    Container,
    ContainerStatus,
    PodView,
    ResourceMap,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "HPA_POD_LEVEL_OPTIONS",
    "SCHEDULER_METRIC_OPTIONS",
    "ResourceOptions",
    "hpa_pod_requests",
    "is_supported_pod_level_resource",
    "pod_limits",
    "pod_requests",
]

_HUGEPAGES_PREFIX: Final = "hugepages-"
# supportedPodLevelResources upstream, plus any hugepages-* (IsSupportedPodLevelResource at
# 1961876b; releases up to 1.33 accepted cpu and memory only).
_POD_LEVEL_RESOURCES: Final = frozenset({"cpu", "memory"})
_ZERO: Final = Decimal(0)


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


def is_supported_pod_level_resource(name: str) -> bool:
    """IsSupportedPodLevelResource at 1961876b: cpu, memory and hugepages-*; O(1)."""
    return name in _POD_LEVEL_RESOURCES or name.startswith(_HUGEPAGES_PREFIX)


def _names_supported(resources: Mapping[str, Quantity] | None) -> bool:
    """Whether a pod-level list names at least one supported resource."""
    return any(is_supported_pod_level_resource(name) for name in resources or ())


# --- Per-container list selection (containerSpecRequests and friends) --------------------

_Getter = Callable[[Container, ContainerStatus | None, bool], ResourceMap | None]


def _spec_list(
    container: Container, _status: ContainerStatus | None, _infeasible: bool
) -> ResourceMap | None:
    """containerSpecRequests / containerSpecLimits."""
    return container.spec


def _allocated_requests(
    container: Container, status: ContainerStatus | None, infeasible: bool
) -> ResourceMap | None:
    """containerAllocatedRequests: allocatedResources, else spec unless the resize is infeasible."""
    if status is not None and status.allocated is not None:
        return status.allocated
    return None if infeasible else container.spec


def _actuated_requests(
    container: Container, status: ContainerStatus | None, infeasible: bool
) -> ResourceMap | None:
    """containerActuatedRequests: resources.requests, else allocatedResources, else spec."""
    if status is not None:
        if status.actual is not None:
            return status.actual
        if status.allocated is not None:
            return status.allocated
    return None if infeasible else container.spec


def _actuated_limits(
    container: Container, status: ContainerStatus | None, infeasible: bool
) -> ResourceMap | None:
    """containerActuatedLimits: resources.limits, else spec unless the resize is infeasible."""
    if status is not None and status.actual is not None:
        return status.actual
    return None if infeasible else container.spec


def _aggregate(view: PodView, getter: _Getter, use_status: bool) -> ResourceMap:
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


def _aggregate_requests(view: PodView, options: ResourceOptions) -> ResourceMap:
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
    view: PodView, spec: ResourceMap | None, *statuses: ResourceMap | None
) -> ResourceMap:
    """effectivePodLevelResources: max(spec, statuses...), spec ignored if resize is infeasible."""
    return _max_of(None if view.infeasible else spec, *statuses)


def _apply_pod_level(result: ResourceMap, effective: Mapping[str, Quantity] | None) -> None:
    """applyPodLevelResources: pod-level values replace the aggregate for supported names."""
    for name, amount in (effective or {}).items():
        if is_supported_pod_level_resource(name):
            result[name] = amount


def _requests(view: PodView, options: ResourceOptions) -> ResourceMap:
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
    return _without_zeros(_requests(PodView.of(pod, "requests"), options))


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
    view = PodView.of(pod, "requests")
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


def _aggregate_limits(view: PodView, options: ResourceOptions) -> ResourceMap:
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
    view = PodView.of(pod, "limits")
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
