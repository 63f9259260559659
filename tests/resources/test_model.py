"""Tests for custom_metrics_server.resources.model.

The request/limit tables are ported from upstream k8s.io/component-helpers/resource
helpers_test.go (TestPodRequestsAndLimits, TestPodRequestsAndLimitsWithoutOverhead,
TestPodResourceRequests, TestPodResourceLimits, TestPodLevelResourceRequests,
TestAggregateContainerRequestsAndLimits, TestPodRequestsAndLimitsVerticalScalingWrappers)
and from kube-scheduler's pkg/scheduler/metrics/resources/resources_test.go; each table
names its source, and each row on the paths where pod-level resources, status resources and
in-place resize meet carries a ``# upstream Test...: "case name"`` comment. Upstream options
are spelled with ``go_opts`` (Go's zero value is ``PodResourcesOptions{}``), expected lists
are upstream's at component-helpers 1961876b. The rows kubernetes/kubernetes#140481 added
(open at that commit) are in ``tests/resources/test_model_pod_level.py`` with both numbers.
Pods are Kubernetes JSON dicts.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.resources.lifecycle import RESOURCE_UNITS, pod_lifecycle, resource_unit
from custom_metrics_server.resources.model import (
    DEFAULT_OPTIONS,
    SCHEDULER_METRIC_OPTIONS,
    ResourceOptions,
    pod_limits,
    pod_requests,
)

Pod = dict[str, Any]
Texts = dict[str, str]

HP2 = "hugepages-2Mi"
HP1G = "hugepages-1Gi"
INFEASIBLE = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]


def go_opts(
    *, status: bool = False, plr: bool = False, skip: bool = False, exclude: bool = False
) -> ResourceOptions:
    """Upstream PodResourcesOptions with Go's zero defaults (all false)."""
    return ResourceOptions(
        use_status_resources=status,
        pod_level_status_resources=plr,
        skip_pod_level_resources=skip,
        exclude_overhead=exclude,
    )


def ctr(
    name: str = "",
    requests: Texts | None = None,
    limits: Texts | None = None,
    *,
    sidecar: bool = False,
) -> dict[str, Any]:
    """A container; ``sidecar`` sets restartPolicy: Always (only meaningful for init)."""
    container: dict[str, Any] = {"name": name, "resources": {}}
    if requests is not None:
        container["resources"]["requests"] = requests
    if limits is not None:
        container["resources"]["limits"] = limits
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def cstat(
    name: str,
    *,
    allocated: Texts | None = None,
    requests: Texts | None = None,
    limits: Texts | None = None,
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A container status with allocatedResources and resources.requests/limits."""
    entry: dict[str, Any] = {"name": name}
    if allocated is not None:
        entry["allocatedResources"] = allocated
    if requests is not None or limits is not None:
        entry["resources"] = {}
        if requests is not None:
            entry["resources"]["requests"] = requests
        if limits is not None:
            entry["resources"]["limits"] = limits
    if state is not None:
        entry["state"] = state
    return entry


def make_pod(
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    overhead: Texts | None = None,
    pod_resources: dict[str, Texts] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    status_resources: dict[str, Texts] | None = None,
    status_allocated: Texts | None = None,
) -> Pod:
    """A pod as the API server returns it, with only the given fields set."""
    spec: dict[str, Any] = {"containers": containers or []}
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_resources is not None:
        spec["resources"] = pod_resources
    status: dict[str, Any] = {}
    if statuses is not None:
        status["containerStatuses"] = statuses
    if init_statuses is not None:
        status["initContainerStatuses"] = init_statuses
    if conditions is not None:
        status["conditions"] = conditions
    if status_resources is not None:
        status["resources"] = status_resources
    if status_allocated is not None:
        status["allocatedResources"] = status_allocated
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": spec,
        "status": status,
    }


def qs(texts: Texts) -> dict[str, Quantity]:
    """Parse an expected resource list."""
    return {name: Quantity.parse(text) for name, text in texts.items()}


def values(resources: Mapping[str, Quantity]) -> dict[str, Decimal]:
    """The exact values of a resource list, for readable assertion diffs."""
    return {name: amount.value for name, amount in resources.items()}


def get_pod(name: str, **fields: str) -> Pod:
    """Upstream getPod: one container and one init container with the same resources."""
    requests = {
        k: v for k, v in (("cpu", fields.get("cpu_req")), ("memory", fields.get("mem_req"))) if v
    }
    limits = {
        k: v for k, v in (("cpu", fields.get("cpu_lim")), ("memory", fields.get("mem_lim"))) if v
    }
    overhead = {
        k: v for k, v in (("cpu", fields.get("cpu_ovh")), ("memory", fields.get("mem_ovh"))) if v
    }
    return make_pod(
        containers=[ctr(name, requests, limits)],
        init=[ctr("init-" + name, requests, limits)],
        overhead=overhead,
    )


# --- Requests and limits together --------------------------------------------------------

BOTH_CASES = [
    # TestPodRequestsAndLimits (PodResourcesOptions{})
    pytest.param(
        get_pod("foo", cpu_lim="9"), go_opts(), {}, {"cpu": "9"}, id="just-limit-no-overhead"
    ),
    pytest.param(
        get_pod("foo", cpu_ovh="5", mem_ovh="5"),
        go_opts(),
        {"cpu": "5", "memory": "5"},
        {},
        id="just-overhead",
    ),
    pytest.param(
        get_pod("foo", cpu_req="1", mem_req="10", cpu_ovh="5", mem_ovh="5"),
        go_opts(),
        {"cpu": "6", "memory": "15"},
        {},
        id="req-and-overhead",
    ),
    pytest.param(
        get_pod(
            "foo", cpu_req="1", cpu_lim="2", mem_req="10", mem_lim="12", cpu_ovh="5", mem_ovh="5"
        ),
        go_opts(),
        {"cpu": "6", "memory": "15"},
        {"cpu": "7", "memory": "17"},
        id="all-req-lim-and-overhead",
    ),
    pytest.param(
        get_pod("foo", cpu_req="1", cpu_lim="2", mem_req="10", cpu_ovh="5", mem_ovh="5"),
        go_opts(),
        {"cpu": "6", "memory": "15"},
        {"cpu": "7"},
        id="req-some-lim-and-overhead",
    ),
    # TestPodRequestsAndLimitsWithoutOverhead (ExcludeOverhead)
    pytest.param(
        make_pod(
            containers=[
                ctr("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
                ctr("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"}),
            ]
        ),
        go_opts(exclude=True),
        {"cpu": "5", "memory": "17"},
        {"cpu": "10", "memory": "34"},
        id="two-containers-no-overhead",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "3", "memory": "8"},
            containers=[
                ctr("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
                ctr("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"}),
            ],
        ),
        go_opts(exclude=True),
        {"cpu": "5", "memory": "17"},
        {"cpu": "10", "memory": "34"},
        id="two-containers-overhead-excluded",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "3", "memory": "8"},
            containers=[
                ctr("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
                ctr("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"}),
            ],
            init=[
                ctr("small-init", {"cpu": "1", "memory": "5"}, {"cpu": "1", "memory": "5"}),
                ctr("big-init", {"cpu": "40", "memory": "120"}, {"cpu": "80", "memory": "240"}),
            ],
        ),
        go_opts(exclude=True),
        {"cpu": "40", "memory": "120"},
        {"cpu": "80", "memory": "240"},
        id="massive-init-overhead-excluded",
    ),
    # TestAggregateContainerRequestsAndLimits (no overhead, no spec.resources)
    pytest.param(
        make_pod(containers=[ctr(limits={"cpu": "9"})]),
        go_opts(),
        {},
        {"cpu": "9"},
        id="agg-one-limit",
    ),
    pytest.param(
        make_pod(containers=[ctr(limits={"cpu": "9"}), ctr(limits={"cpu": "9"})]),
        go_opts(),
        {},
        {"cpu": "18"},
        id="agg-two-limits",
    ),
    pytest.param(
        make_pod(containers=[ctr(requests={"cpu": "9"})]),
        go_opts(),
        {"cpu": "9"},
        {},
        id="agg-one-request",
    ),
    pytest.param(
        make_pod(containers=[ctr(requests={"cpu": "9"}), ctr(requests={"cpu": "9"})]),
        go_opts(),
        {"cpu": "18"},
        {},
        id="agg-two-requests",
    ),
    pytest.param(
        make_pod(containers=[ctr(requests={"cpu": "9"})], init=[ctr(requests={"cpu": "9"})]),
        go_opts(),
        {"cpu": "9"},
        {},
        id="agg-regular-and-init-requests",
    ),
    pytest.param(
        make_pod(
            containers=[ctr(requests={"cpu": "9"})],
            init=[ctr(requests={"cpu": "8"}, sidecar=True), ctr(requests={"cpu": "6"})],
        ),
        go_opts(),
        {"cpu": "17"},
        {},
        id="agg-regular-init-sidecar-requests",
    ),
    pytest.param(
        make_pod(containers=[ctr(limits={"cpu": "9"})], init=[ctr(limits={"cpu": "9"})]),
        go_opts(),
        {},
        {"cpu": "9"},
        id="agg-regular-and-init-limits",
    ),
    pytest.param(
        make_pod(
            containers=[ctr(limits={"cpu": "9"})],
            init=[ctr(limits={"cpu": "8"}, sidecar=True), ctr(limits={"cpu": "6"})],
        ),
        go_opts(),
        {},
        {"cpu": "17"},
        id="agg-regular-init-sidecar-limits",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "regularcontainers with empty requests, but status with non-empty requests"
    pytest.param(
        make_pod(
            containers=[ctr("container-1")], statuses=[cstat("container-1", requests={"cpu": "2"})]
        ),
        go_opts(status=True),
        {"cpu": "2"},
        {},
        id="agg-empty-requests-status-requests",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "always-restart init containers with empty requests, but status with non-empty requests"
    pytest.param(
        make_pod(
            init=[ctr("container-1", sidecar=True)],
            init_statuses=[cstat("container-1", requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "2"},
        {},
        id="agg-sidecar-empty-requests-status-requests",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "aggregate container request resolves max of sums instead of sum of maxes"
    pytest.param(
        make_pod(
            containers=[ctr("c1", {"cpu": "1"}), ctr("c2", {"cpu": "2"})],
            statuses=[cstat("c1", allocated={"cpu": "2"}), cstat("c2", allocated={"cpu": "1"})],
        ),
        go_opts(status=True),
        {"cpu": "3"},
        {},
        id="agg-request-max-of-sums",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "aggregate container limit resolves max of sums instead of sum of maxes"
    pytest.param(
        make_pod(
            containers=[ctr("c1", limits={"cpu": "1"}), ctr("c2", limits={"cpu": "2"})],
            statuses=[cstat("c1", limits={"cpu": "2"}), cstat("c2", limits={"cpu": "1"})],
        ),
        go_opts(status=True),
        {},
        {"cpu": "3"},
        id="agg-limit-max-of-sums",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "aggregate container request/limit resolves directly from pod status when PLR vertical scaling enabled"
    pytest.param(
        make_pod(
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            status_allocated={"cpu": "4"},
            status_resources={"requests": {"cpu": "3"}, "limits": {"cpu": "5"}},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "4"},
        {"cpu": "5"},
        id="agg-from-pod-status-with-plr",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "falls back to container status aggregation when PLR vertical scaling enabled but podAllocatedResources is nil"
    pytest.param(
        make_pod(
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            statuses=[
                cstat("c1", allocated={"cpu": "6"}, requests={"cpu": "5"}, limits={"cpu": "7"})
            ],
            status_resources={"requests": {"cpu": "3"}, "limits": {"cpu": "7"}},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "6"},
        {"cpu": "7"},
        id="agg-plr-fallback-no-pod-allocated",
    ),
    # upstream TestAggregateContainerRequestsAndLimits: "falls back to container status aggregation when PLR vertical scaling enabled but podResources is nil"
    pytest.param(
        make_pod(
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            statuses=[
                cstat("c1", allocated={"cpu": "6"}, requests={"cpu": "5"}, limits={"cpu": "8"})
            ],
            status_allocated={"cpu": "6"},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "6"},
        {"cpu": "8"},
        id="agg-plr-fallback-no-pod-resources",
    ),
    # TestPodRequestsAndLimitsVerticalScalingWrappers (DRA / NonMissing rows not ported)
    # upstream TestPodRequestsAndLimitsVerticalScalingWrappers: "pod level requests/limits with PLR vertical scaling enabled and status populated"
    pytest.param(
        make_pod(
            pod_resources={"requests": {"cpu": "2"}, "limits": {"cpu": "4"}},
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            status_allocated={"cpu": "3"},
            status_resources={"requests": {"cpu": "3.5"}, "limits": {"cpu": "5"}},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "3.5"},
        {"cpu": "5"},
        id="wrap-pod-level-status-populated",
    ),
    # upstream TestPodRequestsAndLimitsVerticalScalingWrappers: "pod level requests/limits with PLR vertical scaling enabled and infeasible resize"
    pytest.param(
        make_pod(
            pod_resources={"requests": {"cpu": "10"}, "limits": {"cpu": "20"}},
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            conditions=INFEASIBLE,
            status_allocated={"cpu": "3"},
            status_resources={"requests": {"cpu": "4"}, "limits": {"cpu": "8"}},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "4"},
        {"cpu": "8"},
        id="wrap-pod-level-infeasible",
    ),
    # upstream TestPodRequestsAndLimitsVerticalScalingWrappers: "container limits aggregation with infeasible resize"
    pytest.param(
        make_pod(
            containers=[ctr("c1", limits={"cpu": "10"})],
            conditions=INFEASIBLE,
            statuses=[cstat("c1", limits={"cpu": "6"})],
        ),
        go_opts(status=True),
        {},
        {"cpu": "6"},
        id="wrap-container-limits-infeasible",
    ),
    # kube-scheduler resources_test.go Test_podResourceCollector_CollectWithStability
    pytest.param(
        make_pod(
            init=[
                ctr(requests={"cpu": "2", "custom": "3"}, limits={"memory": "1G", "custom": "5"})
            ],
            containers=[
                ctr(requests={"cpu": "1", "custom": "0"}, limits={"memory": "2G", "custom": "6"})
            ],
        ),
        SCHEDULER_METRIC_OPTIONS,
        {"cpu": "2", "custom": "3"},
        {"custom": "6", "memory": "2G"},
        id="metric-init-and-regular-containers",
    ),
    pytest.param(
        make_pod(
            containers=[
                ctr(requests={"cpu": "1"}, limits={"cpu": "2"}),
                ctr(requests={"memory": "1G"}, limits={"memory": "2G"}),
                ctr(requests={"cpu": "0.5"}, limits={"cpu": "1.25"}),
                ctr(limits={"memory": "2G"}),
            ]
        ),
        SCHEDULER_METRIC_OPTIONS,
        {"cpu": "1.5", "memory": "1G"},
        {"cpu": "3.25", "memory": "4G"},
        id="metric-aggregate-requests-and-limits",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "0.25", "memory": "0.75G", "custom": "0.5"},
            init=[
                ctr(requests={"cpu": "2", "custom": "3"}, limits={"memory": "1G", "custom": "5"})
            ],
            containers=[
                ctr(requests={"cpu": "1", "custom": "0"}, limits={"memory": "2G", "custom": "6"})
            ],
        ),
        SCHEDULER_METRIC_OPTIONS,
        {"cpu": "2.25", "custom": "3.5", "memory": "750M"},
        {"custom": "6.5", "memory": "2.75G"},
        id="metric-overhead-added",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr(
                    requests={"cpu": "0", "custom": "0", "test.com/custom-metric": "0"},
                    limits={"cpu": "0", "custom": "0", "test.com/custom-metric": "0"},
                )
            ],
            containers=[
                ctr(
                    requests={"cpu": "0", "custom": "0", "test.com/custom-metric": "0"},
                    limits={"cpu": "0", "custom": "0", "test.com/custom-metric": "0"},
                )
            ],
        ),
        SCHEDULER_METRIC_OPTIONS,
        {},
        {},
        id="metric-zero-resources-excluded",
    ),
    pytest.param(
        make_pod(
            containers=[
                ctr(
                    requests={"storage": "5", "ephemeral-storage": "6"},
                    limits={
                        "hugepages-x": "1",
                        "hugepages-": "2",
                        "attachable-volumes-aws": "3",
                        "attachable-volumes-": "4",
                    },
                )
            ]
        ),
        SCHEDULER_METRIC_OPTIONS,
        {"storage": "5", "ephemeral-storage": "6"},
        {
            "hugepages-x": "1",
            "hugepages-": "2",
            "attachable-volumes-aws": "3",
            "attachable-volumes-": "4",
        },
        id="metric-standard-resource-units",
    ),
]


@pytest.mark.parametrize(("pod", "options", "requests", "limits"), BOTH_CASES)
def test_pod_requests_and_limits(
    pod: Pod, options: ResourceOptions, requests: Texts, limits: Texts
) -> None:
    assert values(pod_requests(pod, options=options)) == values(qs(requests))
    assert values(pod_limits(pod, options=options)) == values(qs(limits))


# --- TestPodResourceRequests ------------------------------------------------------------

REQUEST_CASES = [
    pytest.param(
        make_pod(init=[ctr(requests={"cpu": "4"})], containers=[ctr(requests={"cpu": "1"})]),
        go_opts(),
        {"cpu": "4"},
        id="nil-options-larger-init",
    ),
    pytest.param(
        make_pod(
            init=[ctr(requests={"cpu": "2"})],
            containers=[ctr(requests={"cpu": "2"}), ctr(requests={"cpu": "3"})],
        ),
        go_opts(),
        {"cpu": "5"},
        id="nil-options-larger-containers",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "1"},
            init=[ctr(requests={"cpu": "2"})],
            containers=[ctr(requests={"cpu": "2"}), ctr(requests={"cpu": "3"})],
        ),
        go_opts(exclude=True),
        {"cpu": "5"},
        id="pod-overhead-excluded",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "1", "memory": "1Gi"},
            init=[ctr(requests={"cpu": "2"}, limits={"cpu": "2"})],
            containers=[ctr(requests={"cpu": "2"}), ctr(requests={"cpu": "3"})],
        ),
        go_opts(),
        {"cpu": "6", "memory": "1Gi"},
        id="pod-overhead-included",
    ),
    # upstream TestPodResourceRequests: "resized, infeasible"
    pytest.param(
        make_pod(
            conditions=INFEASIBLE,
            containers=[ctr("container-1", {"cpu": "4"})],
            statuses=[cstat("container-1", requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "2"},
        id="resized-infeasible",
    ),
    # upstream TestPodResourceRequests: "resized, infeasible & in-progress"
    pytest.param(
        make_pod(
            conditions=INFEASIBLE,
            containers=[ctr("container-1", {"cpu": "6"})],
            statuses=[cstat("container-1", allocated={"cpu": "4"}, requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "4"},
        id="resized-infeasible-and-in-progress",
    ),
    # upstream TestPodResourceRequests: "resized, no resize status"
    pytest.param(
        make_pod(
            containers=[ctr("container-1", {"cpu": "4"})],
            statuses=[cstat("container-1", requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "4"},
        id="resized-no-resize-status",
    ),
    # upstream TestPodResourceRequests: "resized: per-resource 3-way maximum"
    pytest.param(
        make_pod(
            containers=[
                ctr("container-1", {"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"})
            ],
            statuses=[
                cstat(
                    "container-1",
                    allocated={"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                    requests={"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"},
                )
            ],
        ),
        go_opts(status=True),
        {"cpu": "30m", "memory": "30M", "ephemeral-storage": "30G"},
        id="resized-per-resource-3-way-maximum",
    ),
    # upstream TestPodResourceRequests: "resized, infeasible, but don't use status"
    pytest.param(
        make_pod(
            conditions=INFEASIBLE,
            containers=[ctr("container-1", {"cpu": "4"})],
            statuses=[cstat("container-1", requests={"cpu": "2"})],
        ),
        go_opts(status=False),
        {"cpu": "4"},
        id="resized-infeasible-status-not-used",
    ),
    # upstream TestPodResourceRequests: "resized, restartable init container, infeasible"
    pytest.param(
        make_pod(
            conditions=INFEASIBLE,
            init=[ctr("restartable-init-1", {"cpu": "4"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "2"},
        id="resized-sidecar-infeasible",
    ),
    # upstream TestPodResourceRequests: "resized, restartable init container, no resize status"
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", {"cpu": "4"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", requests={"cpu": "2"})],
        ),
        go_opts(status=True),
        {"cpu": "4"},
        id="resized-sidecar-no-resize-status",
    ),
    # upstream TestPodResourceRequests: "resized, restartable init container, infeasible, but don't use status"
    pytest.param(
        make_pod(
            conditions=INFEASIBLE,
            init=[ctr("restartable-init-1", {"cpu": "4"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", requests={"cpu": "2"})],
        ),
        go_opts(status=False),
        {"cpu": "4"},
        id="resized-sidecar-infeasible-status-not-used",
    ),
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", {"cpu": "1"}, sidecar=True)],
            containers=[ctr("container-1", {"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "2"},
        id="restartable-init-container",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("init-1", {"cpu": "5"}),
                ctr("restartable-init-1", {"cpu": "1"}, sidecar=True),
                ctr("restartable-init-2", {"cpu": "2"}, sidecar=True),
                ctr("restartable-init-3", {"cpu": "3"}, sidecar=True),
            ],
            containers=[ctr("container-1", {"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "7"},
        id="multiple-restartable-init-containers",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("init-1", {"cpu": "5"}),
                ctr("restartable-init-1", {"cpu": "1"}, sidecar=True),
                ctr("restartable-init-2", {"cpu": "2"}, sidecar=True),
                ctr("init-2", {"cpu": "5"}),
                ctr("restartable-init-3", {"cpu": "3"}, sidecar=True),
            ],
            containers=[ctr("container-1", {"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "8"},
        id="multiple-restartable-and-regular-init-containers",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("restartable-init-1", {"cpu": "10"}, sidecar=True),
                ctr("init-1", {"cpu": "200"}),
            ],
            containers=[ctr("container-1", {"cpu": "100"})],
        ),
        go_opts(),
        {"cpu": "210"},
        id="restartable-init-init-and-regular",
    ),
    # upstream TestPodResourceRequests: "aggregate request resolves max of sums instead of sum of maxes"
    pytest.param(
        make_pod(
            containers=[ctr("c1", {"cpu": "1"}), ctr("c2", {"cpu": "2"})],
            statuses=[cstat("c1", allocated={"cpu": "2"}), cstat("c2", allocated={"cpu": "1"})],
        ),
        go_opts(status=True),
        {"cpu": "3"},
        id="request-max-of-sums-not-sum-of-maxes",
    ),
]


@pytest.mark.parametrize(("pod", "options", "expected"), REQUEST_CASES)
def test_pod_resource_requests(pod: Pod, options: ResourceOptions, expected: Texts) -> None:
    assert values(pod_requests(pod, options=options)) == values(qs(expected))


# --- TestPodResourceLimits --------------------------------------------------------------

LIMIT_CASES = [
    pytest.param(
        make_pod(init=[ctr(limits={"cpu": "4"})], containers=[ctr(limits={"cpu": "1"})]),
        go_opts(),
        {"cpu": "4"},
        id="nil-options-larger-init",
    ),
    pytest.param(
        make_pod(
            init=[ctr(limits={"cpu": "2"})],
            containers=[ctr(limits={"cpu": "2"}), ctr(limits={"cpu": "3"})],
        ),
        go_opts(),
        {"cpu": "5"},
        id="nil-options-larger-containers",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "1"},
            init=[ctr(limits={"cpu": "2"})],
            containers=[ctr(limits={"cpu": "2"}), ctr(limits={"cpu": "3"})],
        ),
        go_opts(exclude=True),
        {"cpu": "5"},
        id="pod-overhead-excluded",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "1", "memory": "1Gi"},
            init=[ctr(limits={"cpu": "2"})],
            containers=[ctr(limits={"cpu": "2"}), ctr(limits={"cpu": "3"})],
        ),
        go_opts(),
        {"cpu": "6"},  # overhead only goes to non-zero limits: no memory limit
        id="pod-overhead-included",
    ),
    pytest.param(make_pod(containers=[ctr()]), go_opts(), {}, id="no-limited-containers"),
    pytest.param(
        make_pod(containers=[ctr(limits={"cpu": "2", "memory": "2Gi"}), ctr()]),
        go_opts(),
        {"cpu": "2", "memory": "2Gi"},
        id="one-limited-one-unlimited-container",
    ),
    pytest.param(
        make_pod(
            init=[ctr(limits={"cpu": "2", "memory": "2Gi"}), ctr()],
            containers=[ctr(limits={"cpu": "1", "memory": "1Gi"})],
        ),
        go_opts(),
        {"cpu": "2", "memory": "2Gi"},
        id="one-limited-one-unlimited-init-container",
    ),
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", limits={"cpu": "1"}, sidecar=True)],
            containers=[ctr("container-1", limits={"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "2"},
        id="restartable-init-container",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("init-1", limits={"cpu": "5"}),
                ctr("restartable-init-1", limits={"cpu": "1"}, sidecar=True),
                ctr("restartable-init-2", limits={"cpu": "2"}, sidecar=True),
                ctr("restartable-init-3", limits={"cpu": "3"}, sidecar=True),
            ],
            containers=[ctr("container-1", limits={"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "7"},
        id="multiple-restartable-init-containers",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("init-1", limits={"cpu": "5"}),
                ctr("restartable-init-1", limits={"cpu": "1"}, sidecar=True),
                ctr("restartable-init-2", limits={"cpu": "2"}, sidecar=True),
                ctr("init-2", limits={"cpu": "5"}),
                ctr("restartable-init-3", limits={"cpu": "3"}, sidecar=True),
            ],
            containers=[ctr("container-1", limits={"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "8"},
        id="multiple-restartable-and-regular-init-containers",
    ),
    pytest.param(
        make_pod(
            init=[
                ctr("restartable-init-1", limits={"cpu": "10"}, sidecar=True),
                ctr("init-1", limits={"cpu": "200"}),
            ],
            containers=[ctr("container-1", limits={"cpu": "100"})],
        ),
        go_opts(),
        {"cpu": "210"},
        id="restartable-init-init-and-regular",
    ),
    # upstream TestPodResourceLimits: "pod scaled up"
    pytest.param(
        make_pod(
            containers=[ctr("container-1", limits={"memory": "2Gi"})],
            statuses=[cstat("container-1", limits={"memory": "1Gi"})],
        ),
        go_opts(status=True),
        {"memory": "2Gi"},
        id="pod-scaled-up",
    ),
    # upstream TestPodResourceLimits: "pod scaled down"
    pytest.param(
        make_pod(
            containers=[ctr("container-1", limits={"memory": "1Gi"})],
            statuses=[cstat("container-1", limits={"memory": "2Gi"})],
        ),
        go_opts(status=True),
        {"memory": "2Gi"},
        id="pod-scaled-down",
    ),
    # upstream TestPodResourceLimits: "pod scaled down, don't use status"
    pytest.param(
        make_pod(
            containers=[ctr("container-1", limits={"memory": "1Gi"})],
            statuses=[cstat("container-1", limits={"memory": "2Gi"})],
        ),
        go_opts(status=False),
        {"memory": "1Gi"},
        id="pod-scaled-down-status-not-used",
    ),
    # upstream TestPodResourceLimits: "pod scaled up with restartable init containers"
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", limits={"memory": "2Gi"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", limits={"memory": "1Gi"})],
        ),
        go_opts(status=True),
        {"memory": "2Gi"},
        id="pod-scaled-up-sidecar",
    ),
    # upstream TestPodResourceLimits: "pod scaled down with restartable init containers"
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", limits={"memory": "1Gi"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", limits={"memory": "2Gi"})],
        ),
        go_opts(status=True),
        {"memory": "2Gi"},
        id="pod-scaled-down-sidecar",
    ),
    # upstream TestPodResourceLimits: "pod scaled down with restartable init containers, don't use status"
    pytest.param(
        make_pod(
            init=[ctr("restartable-init-1", limits={"memory": "1Gi"}, sidecar=True)],
            init_statuses=[cstat("restartable-init-1", limits={"memory": "2Gi"})],
        ),
        go_opts(status=False),
        {"memory": "1Gi"},
        id="pod-scaled-down-sidecar-status-not-used",
    ),
    # upstream TestPodResourceLimits: "aggregate limit resolves max of sums instead of sum of maxes"
    pytest.param(
        make_pod(
            containers=[ctr("c1", limits={"cpu": "1"}), ctr("c2", limits={"cpu": "2"})],
            statuses=[cstat("c1", limits={"cpu": "2"}), cstat("c2", limits={"cpu": "1"})],
        ),
        go_opts(status=True),
        {"cpu": "3"},
        id="limit-max-of-sums-not-sum-of-maxes",
    ),
]


@pytest.mark.parametrize(("pod", "options", "expected"), LIMIT_CASES)
def test_pod_resource_limits(pod: Pod, options: ResourceOptions, expected: Texts) -> None:
    assert values(pod_limits(pod, options=options)) == values(qs(expected))


# --- TestPodLevelResourceRequests -------------------------------------------------------

_SMALL = {"memory": "3Mi", "cpu": "2m"}
_INIT = {"memory": "5Mi", "cpu": "4m"}
_BIG_INIT = {"memory": "6Mi", "cpu": "8m"}
_STATUS_OPTS = go_opts(status=True, plr=True)
_OVERHEAD = {"cpu": "100m", "memory": "10Mi"}
_POD_LEVEL = {"requests": {"cpu": "1", "memory": "100Mi"}}


def plr_pod(
    pod_resources: dict[str, Texts],
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    overhead: Texts | None = None,
    status_requests: Texts | None = None,
    allocated: Texts | None = None,
) -> Pod:
    """Upstream getPodLevelResourcesPod, plus status.resources.requests/allocatedResources."""
    return make_pod(
        pod_resources=pod_resources,
        containers=containers,
        init=init,
        overhead=overhead,
        status_resources=None if status_requests is None else {"requests": status_requests},
        status_allocated=allocated,
    )


POD_LEVEL_CASES = [
    # upstream TestPodLevelResourceRequests: "nil"
    pytest.param(plr_pod({}), go_opts(), {}, id="nil"),
    # upstream TestPodLevelResourceRequests: "pod level memory resource with SkipPodLevelResources true"
    pytest.param(
        plr_pod({"requests": {"memory": "2Mi"}}),
        go_opts(skip=True),
        {},
        id="pod-level-memory-skipped",
    ),
    # upstream TestPodLevelResourceRequests: "pod level memory resource with SkipPodLevelResources false"
    pytest.param(
        plr_pod({"requests": {"memory": "2Mi"}}),
        go_opts(),
        {"memory": "2Mi"},
        id="pod-level-memory",
    ),
    # upstream TestPodLevelResourceRequests: "pod level memory and container level cpu resources with SkipPodLevelResources false"
    pytest.param(
        plr_pod({"requests": {"memory": "2Mi"}}, containers=[ctr(requests={"cpu": "2m"})]),
        go_opts(),
        {"memory": "2Mi", "cpu": "2m"},
        id="pod-level-memory-container-cpu",
    ),
    # upstream TestPodLevelResourceRequests: "pod level unsupported resources set at both pod-level and container-level with SkipPodLevelResources false"
    pytest.param(
        plr_pod({"requests": {"storage": "2Mi"}}, containers=[ctr(requests={"storage": "3Mi"})]),
        go_opts(),
        {"storage": "3Mi"},
        id="unsupported-at-both-levels",
    ),
    # upstream TestPodLevelResourceRequests: "pod level unsupported resources set at pod-level with SkipPodLevelResources false"
    pytest.param(
        plr_pod({"requests": {"storage": "2Mi"}}, containers=[ctr(requests={"memory": "3Mi"})]),
        go_opts(),
        {"memory": "3Mi"},
        id="unsupported-at-pod-level",
    ),
    # upstream TestPodLevelResourceRequests: "only container level resources set with SkipPodLevelResources false"
    pytest.param(
        plr_pod({}, containers=[ctr(requests=_SMALL)]), go_opts(), _SMALL, id="only-container-level"
    ),
    # upstream TestPodLevelResourceRequests: "both container-level and pod-level resources set with SkipPodLevelResources false"
    pytest.param(
        plr_pod({"requests": {"memory": "6Mi", "cpu": "8m"}}, containers=[ctr(requests=_SMALL)]),
        go_opts(),
        {"memory": "6Mi", "cpu": "8m"},
        id="pod-level-overrides-container-level",
    ),
    # upstream TestPodLevelResourceRequests: "container-level resources and init container set with SkipPodLevelResources false"
    pytest.param(
        plr_pod({}, containers=[ctr(requests=_SMALL)], init=[ctr(requests=_INIT)]),
        go_opts(),
        _INIT,
        id="container-and-init",
    ),
    # upstream TestPodLevelResourceRequests: "container-level resources and init container set with SkipPodLevelResources false (the second, SkipPodLevelResources: true)"
    pytest.param(
        plr_pod({}, containers=[ctr(requests=_SMALL)], init=[ctr(requests=_INIT)]),
        go_opts(skip=True),
        _INIT,
        id="container-and-init-skipped",
    ),
    # upstream TestPodLevelResourceRequests: "container-level resources and sidecar container set with SkipPodLevelResources false"
    pytest.param(
        plr_pod({}, containers=[ctr(requests=_SMALL)], init=[ctr(requests=_INIT, sidecar=True)]),
        go_opts(),
        {"memory": "8Mi", "cpu": "6m"},
        id="container-and-sidecar",
    ),
    # upstream TestPodLevelResourceRequests: "container-level resources, init and sidecar container set with SkipPodLevelResources false"
    pytest.param(
        plr_pod(
            {},
            containers=[ctr(requests=_SMALL)],
            init=[ctr(requests=_INIT, sidecar=True), ctr(requests=_BIG_INIT)],
        ),
        go_opts(),
        {"memory": "11Mi", "cpu": "12m"},
        id="container-init-and-sidecar",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, container-level resources, init and sidecar container set with SkipPodLevelResources false"
    pytest.param(
        plr_pod(
            {"requests": {"memory": "15Mi", "cpu": "18m"}},
            containers=[ctr(requests=_SMALL)],
            init=[ctr(requests=_INIT, sidecar=True), ctr(requests=_BIG_INIT)],
        ),
        go_opts(),
        {"memory": "15Mi", "cpu": "18m"},
        id="pod-level-container-init-and-sidecar",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, hugepage request/limit single page size"
    pytest.param(
        plr_pod({"limits": {HP2: "2Mi"}, "requests": {"memory": "10Mi", HP2: "2Mi"}}),
        go_opts(),
        {"memory": "10Mi", HP2: "2Mi"},
        id="hugepages-single-size",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, hugepage request/limit multiple page sizes"
    pytest.param(
        plr_pod(
            {
                "limits": {HP2: "2Mi", HP1G: "1Gi"},
                "requests": {"cpu": "1", HP2: "2Mi", HP1G: "1Gi"},
            }
        ),
        go_opts(),
        {"cpu": "1", HP2: "2Mi", HP1G: "1Gi"},
        id="hugepages-multiple-sizes",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, container-level resources, hugepage request/limit single page size"
    pytest.param(
        plr_pod(
            {"limits": {HP2: "10Mi"}, "requests": {"cpu": "1", HP2: "10Mi"}},
            containers=[ctr(requests={HP2: "6Mi"}, limits={HP2: "6Mi"})],
        ),
        go_opts(),
        {"cpu": "1", HP2: "10Mi"},
        id="hugepages-pod-and-container-single-size",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, container-level resources, hugepage request/limit multiple page sizes"
    pytest.param(
        plr_pod(
            {
                "limits": {HP2: "10Mi", HP1G: "2Gi"},
                "requests": {"cpu": "1", HP2: "10Mi", HP1G: "2Gi"},
            },
            containers=[ctr(requests={"cpu": "1", HP1G: "2Gi"}, limits={HP1G: "2Gi"})],
        ),
        go_opts(),
        {"cpu": "1", HP2: "10Mi", HP1G: "2Gi"},
        id="hugepages-pod-and-container-multiple-sizes",
    ),
    # upstream TestPodLevelResourceRequests: "pod-level resources, container-level resources, hugepage request/limit multiple page sizes between pod-level and container-level"
    pytest.param(
        plr_pod(
            {"limits": {HP2: "10Mi"}, "requests": {"cpu": "1", HP2: "10Mi"}},
            containers=[ctr(requests={"memory": "4Mi", HP1G: "1Gi"}, limits={HP1G: "1Gi"})],
        ),
        go_opts(),
        {"cpu": "1", "memory": "4Mi", HP2: "10Mi", HP1G: "1Gi"},
        id="hugepages-sizes-split-between-levels",
    ),
]


@pytest.mark.parametrize(("pod", "options", "expected"), POD_LEVEL_CASES)
def test_pod_level_resource_requests(pod: Pod, options: ResourceOptions, expected: Texts) -> None:
    assert values(pod_requests(pod, options=options)) == values(qs(expected))


# --- Pod-level limits (no upstream table in this form; derived from PodLimits' code) -------

POD_LEVEL_LIMIT_CASES = [
    pytest.param(
        make_pod(
            pod_resources={"limits": {"cpu": "4"}},
            containers=[ctr(limits={"cpu": "1", "memory": "1Gi"}), ctr(limits={"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "4", "memory": "1Gi"},
        id="pod-level-cpu-limit-replaces-container-sum",
    ),
    pytest.param(
        make_pod(
            pod_resources={"limits": {"cpu": "4"}},
            containers=[ctr(limits={"cpu": "1"})],
        ),
        go_opts(skip=True),
        {"cpu": "1"},
        id="pod-level-limit-skipped",
    ),
    pytest.param(
        make_pod(
            pod_resources={"requests": {"cpu": "2"}},
            containers=[ctr(limits={"cpu": "1"})],
        ),
        go_opts(),
        {"cpu": "1"},
        id="pod-level-requests-only-leave-container-limits",
    ),
    pytest.param(
        make_pod(
            pod_resources={"limits": {"ephemeral-storage": "4Gi"}},
            containers=[ctr(limits={"ephemeral-storage": "1Gi"})],
        ),
        go_opts(),
        {"ephemeral-storage": "1Gi"},
        id="unsupported-pod-level-limit-ignored",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "250m", "memory": "64Mi"},
            pod_resources={"limits": {"cpu": "2"}},
            containers=[ctr(limits={"memory": "1Gi"})],
        ),
        go_opts(),
        {"cpu": "2250m", "memory": "1088Mi"},
        id="pod-level-limit-plus-overhead",
    ),
    pytest.param(
        make_pod(
            pod_resources={"limits": {"cpu": "4"}},
            containers=[ctr("c1", limits={"cpu": "1"})],
            status_resources={"limits": {"cpu": "6"}},
        ),
        go_opts(status=True, plr=True),
        {"cpu": "6"},
        id="pod-level-limit-resized-down-keeps-actual",
    ),
]


@pytest.mark.parametrize(("pod", "options", "expected"), POD_LEVEL_LIMIT_CASES)
def test_pod_level_resource_limits(pod: Pod, options: ResourceOptions, expected: Texts) -> None:
    assert values(pod_limits(pod, options=options)) == values(qs(expected))


# --- Our defaults, the metric's options, and the documented deviations -----------------------

RESIZING = make_pod(
    containers=[ctr("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2"})],
    statuses=[
        cstat(
            "app",
            allocated={"cpu": "1500m", "memory": "1Gi"},
            requests={"cpu": "1500m", "memory": "1Gi"},
            limits={"cpu": "3"},
        )
    ],
)


def test_default_options_use_status_resources() -> None:
    assert DEFAULT_OPTIONS.use_status_resources
    assert DEFAULT_OPTIONS.pod_level_status_resources
    assert not DEFAULT_OPTIONS.skip_pod_level_resources
    assert not DEFAULT_OPTIONS.exclude_overhead
    assert values(pod_requests(RESIZING)) == values(qs({"cpu": "1500m", "memory": "1Gi"}))
    assert values(pod_limits(RESIZING)) == values(qs({"cpu": "3"}))


def test_scheduler_metric_options_read_the_spec_only() -> None:
    assert go_opts() == SCHEDULER_METRIC_OPTIONS
    assert values(pod_requests(RESIZING, options=SCHEDULER_METRIC_OPTIONS)) == values(
        qs({"cpu": "1", "memory": "1Gi"})
    )
    assert values(pod_limits(RESIZING, options=SCHEDULER_METRIC_OPTIONS)) == values(
        qs({"cpu": "2"})
    )


LEGACY_RESIZE_CASES = [
    pytest.param(None, "Infeasible", {"cpu": "2"}, id="legacy-status-resize-infeasible"),
    pytest.param(None, "InProgress", {"cpu": "4"}, id="legacy-status-resize-in-progress"),
    pytest.param(
        [{"type": "PodResizePending", "status": "True", "reason": "Deferred"}],
        "Infeasible",
        {"cpu": "4"},
        id="condition-wins-over-legacy-field",
    ),
    pytest.param(INFEASIBLE, None, {"cpu": "2"}, id="condition-infeasible"),
    pytest.param(
        [{"type": "PodResizeInProgress", "status": "True"}],
        None,
        {"cpu": "4"},
        id="other-condition",
    ),
]


@pytest.mark.parametrize(("conditions", "resize", "expected"), LEGACY_RESIZE_CASES)
def test_resize_infeasible_sources(
    conditions: list[dict[str, Any]] | None, resize: str | None, expected: Texts
) -> None:
    pod = make_pod(
        conditions=conditions,
        containers=[ctr("container-1", {"cpu": "4"})],
        statuses=[cstat("container-1", requests={"cpu": "2"})],
    )
    if resize is not None:
        pod["status"]["resize"] = resize
    assert values(pod_requests(pod, options=go_opts(status=True))) == values(qs(expected))


def test_zero_values_are_omitted_where_upstream_keeps_them() -> None:
    # Upstream returns {"cpu": 0, "memory": 1Gi} here: the pod-level cpu "0" replaces the sum.
    pod = make_pod(
        pod_resources={"requests": {"cpu": "0"}},
        containers=[ctr(requests={"cpu": "1", "memory": "1Gi", "example.com/foo": "0"})],
    )
    assert values(pod_requests(pod)) == values(qs({"memory": "1Gi"}))


def test_extended_resources_are_generic() -> None:
    pod = make_pod(
        overhead={"nvidia.com/gpu": "1"},
        init=[ctr(requests={"nvidia.com/gpu": "4", HP2: "4Mi"}, limits={"nvidia.com/gpu": "4"})],
        containers=[
            ctr(
                requests={"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"},
                limits={"nvidia.com/gpu": "1"},
            ),
            ctr(requests={"nvidia.com/gpu": "2", HP2: "2Mi"}, limits={"nvidia.com/gpu": "2"}),
        ],
    )
    assert values(pod_requests(pod)) == values(
        qs({"nvidia.com/gpu": "5", HP2: "4Mi", "ephemeral-storage": "1Gi"})
    )
    assert values(pod_limits(pod)) == values(qs({"nvidia.com/gpu": "5"}))


def test_results_render_canonically_and_are_fresh() -> None:
    pod = make_pod(
        containers=[ctr(requests={"cpu": "100m", "memory": "64Mi"}), ctr(requests={"cpu": "0.9"})]
    )
    first = pod_requests(pod)
    assert {name: str(amount) for name, amount in first.items()} == {"cpu": "1", "memory": "64Mi"}
    first["cpu"] = Quantity.parse("7")
    assert pod_requests(pod)["cpu"] == Quantity.parse("1")


def test_input_pod_is_not_modified() -> None:
    pod = plr_pod(
        _POD_LEVEL, overhead=_OVERHEAD, status_requests={"cpu": "1"}, allocated={"cpu": "1"}
    )
    before = copy.deepcopy(pod)
    pod_requests(pod)
    pod_limits(pod)
    pod_lifecycle(pod)
    assert pod == before


def test_status_names_resolve_init_statuses_too() -> None:
    # findContainerStatus searches containerStatuses, then initContainerStatuses.
    pod = make_pod(
        containers=[ctr("app", {"cpu": "1"})],
        init_statuses=[cstat("app", allocated={"cpu": "3"})],
    )
    assert values(pod_requests(pod)) == values(qs({"cpu": "3"}))


# --- Input handling ---------------------------------------------------------------------

LENIENT_INPUTS = [
    pytest.param({}, {}, id="empty-pod"),
    pytest.param({"spec": None, "status": None}, {}, id="null-spec-and-status"),
    pytest.param({"spec": {"containers": [{"name": "a"}]}}, {}, id="container-without-resources"),
    pytest.param(
        {"spec": {"containers": [{"resources": {"requests": None}}]}}, {}, id="null-requests"
    ),
    pytest.param(
        {"spec": {"containers": [{"resources": {"requests": {"cpu": 2}}}]}}, {"cpu": "2"}, id="int"
    ),
    pytest.param(
        {"spec": {"containers": [{"resources": {"requests": {"cpu": 0.25}}}]}},
        {"cpu": "250m"},
        id="float",
    ),
]


@pytest.mark.parametrize(("pod", "expected"), LENIENT_INPUTS)
def test_lenient_inputs(pod: Pod, expected: Texts) -> None:
    assert values(pod_requests(pod)) == values(qs(expected))


def test_invalid_quantity_names_its_place() -> None:
    pod = make_pod(containers=[ctr(requests={"cpu": "lots"})])
    with pytest.raises(ValueError, match=r"spec\.containers\[0\]\.resources\.requests\.cpu"):
        pod_requests(pod)


BAD_TYPES = [
    pytest.param({"spec": {"containers": {"name": "a"}}}, id="containers-object"),
    pytest.param({"spec": {"containers": "a"}}, id="containers-string"),
    pytest.param(
        {"spec": {"containers": [{"resources": {"requests": {"cpu": True}}}]}}, id="bool-quantity"
    ),
    pytest.param(
        {"spec": {"containers": [{"resources": {"requests": ["1"]}}]}}, id="requests-array"
    ),
    pytest.param({"spec": "x"}, id="spec-string"),
]


@pytest.mark.parametrize("pod", BAD_TYPES)
def test_wrong_json_types_raise_type_error(pod: Pod) -> None:
    with pytest.raises(TypeError):
        pod_requests(pod)


# --- Lifecycle (KEP-1748) ---------------------------------------------------------------

TERMINATED = {"terminated": {"exitCode": 0, "reason": "Completed"}}
RUNNING = {"running": {"startedAt": "2024-01-01T00:00:00Z"}}
WAITING = {"waiting": {"reason": "PodInitializing"}}


def lifecycle_pod(
    *,
    node: str | None = None,
    phase: str | None = None,
    deleted: bool = False,
    init: list[str] | None = None,
    containers: list[str] | None = None,
    init_states: dict[str, dict[str, Any]] | None = None,
    states: dict[str, dict[str, Any]] | None = None,
) -> Pod:
    """A pod with names only, plus node, phase, deletion and container states."""
    pod = make_pod(
        containers=[ctr(name) for name in containers or ["app"]],
        init=[ctr(name) for name in init] if init else None,
        init_statuses=[cstat(name, state=state) for name, state in (init_states or {}).items()],
        statuses=[cstat(name, state=state) for name, state in (states or {}).items()],
    )
    if node is not None:
        pod["spec"]["nodeName"] = node
    if phase is not None:
        pod["status"]["phase"] = phase
    if deleted:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return pod


LIFECYCLE_CASES = [
    pytest.param({}, "Schedulable", id="empty-pod"),
    pytest.param(lifecycle_pod(), "Schedulable", id="new-pod"),
    pytest.param(lifecycle_pod(phase="Pending"), "Schedulable", id="pending-unbound"),
    pytest.param(lifecycle_pod(node=""), "Schedulable", id="empty-node-name"),
    pytest.param(lifecycle_pod(node="n1"), "Runnable", id="bound-no-status-yet"),
    pytest.param(lifecycle_pod(node="n1", phase="Pending"), "Runnable", id="bound-pending"),
    pytest.param(lifecycle_pod(node="n1", phase="Running"), "Runnable", id="running"),
    pytest.param(lifecycle_pod(node="n1", phase="Unknown"), "Runnable", id="unknown-phase"),
    pytest.param(lifecycle_pod(node="n1", phase="Succeeded"), "Completed", id="succeeded"),
    pytest.param(lifecycle_pod(node="n1", phase="Failed"), "Completed", id="failed"),
    pytest.param(lifecycle_pod(phase="Failed"), "Completed", id="failed-unbound"),
    pytest.param(lifecycle_pod(phase="Succeeded"), "Completed", id="succeeded-unbound"),
    pytest.param(
        lifecycle_pod(node="n1", phase="Running", deleted=True, states={"app": RUNNING}),
        "Runnable",
        id="terminating-still-running",
    ),
    pytest.param(
        lifecycle_pod(node="n1", phase="Running", deleted=True, states={"app": TERMINATED}),
        "Completed",
        id="terminating-all-stopped",
    ),
    pytest.param(
        lifecycle_pod(node="n1", phase="Running", deleted=True, states={"app": WAITING}),
        "Runnable",
        id="terminating-container-waiting",
    ),
    pytest.param(
        lifecycle_pod(node="n1", phase="Running", deleted=True),
        "Runnable",
        id="terminating-no-container-statuses",
    ),
    pytest.param(
        lifecycle_pod(
            node="n1",
            phase="Running",
            deleted=True,
            containers=["app", "log"],
            states={"app": TERMINATED},
        ),
        "Runnable",
        id="terminating-one-container-unreported",
    ),
    pytest.param(
        lifecycle_pod(
            node="n1",
            phase="Running",
            deleted=True,
            init=["setup", "proxy"],
            init_states={"setup": TERMINATED, "proxy": RUNNING},
            states={"app": TERMINATED},
        ),
        "Runnable",
        id="terminating-sidecar-running",
    ),
    pytest.param(
        lifecycle_pod(
            node="n1",
            phase="Running",
            deleted=True,
            init=["setup", "proxy"],
            init_states={"setup": TERMINATED, "proxy": TERMINATED},
            states={"app": TERMINATED},
        ),
        "Completed",
        id="terminating-init-sidecar-and-app-stopped",
    ),
    pytest.param(
        lifecycle_pod(node="n1", phase="Running", init=["setup"], states={"app": TERMINATED}),
        "Runnable",
        id="not-deleted-containers-between-restarts",
    ),
    pytest.param(lifecycle_pod(deleted=True), "Schedulable", id="terminating-unbound-no-statuses"),
    pytest.param(
        {"metadata": {"deletionTimestamp": None}, "spec": {"nodeName": "n1", "containers": []}},
        "Runnable",
        id="null-deletion-timestamp",
    ),
]


@pytest.mark.parametrize(("pod", "expected"), LIFECYCLE_CASES)
def test_pod_lifecycle(pod: Pod, expected: str) -> None:
    assert pod_lifecycle(pod) == expected


# --- Units (kube-scheduler resources.go) --------------------------------------------------

UNIT_CASES = [
    pytest.param("cpu", "cores", id="cpu"),
    pytest.param("memory", "bytes", id="memory"),
    pytest.param("storage", "bytes", id="storage"),
    pytest.param("ephemeral-storage", "bytes", id="ephemeral-storage"),
    pytest.param(HP2, "bytes", id="hugepages-2Mi"),
    pytest.param(HP1G, "bytes", id="hugepages-1Gi"),
    pytest.param("hugepages-", "bytes", id="hugepages-bare-prefix"),
    pytest.param("attachable-volumes-aws-ebs", "integer", id="attachable-volumes"),
    pytest.param("attachable-volumes-", "integer", id="attachable-volumes-bare-prefix"),
    pytest.param("nvidia.com/gpu", "", id="extended-resource"),
    pytest.param("custom", "", id="unprefixed-custom"),
    pytest.param("pods", "", id="pods"),
    pytest.param("CPU", "", id="case-sensitive"),
]


@pytest.mark.parametrize(("name", "unit"), UNIT_CASES)
def test_resource_unit(name: str, unit: str) -> None:
    assert resource_unit(name) == unit


def test_resource_units_table() -> None:
    assert RESOURCE_UNITS == {
        "cpu": "cores",
        "memory": "bytes",
        "storage": "bytes",
        "ephemeral-storage": "bytes",
    }


# --- Properties -----------------------------------------------------------------------

NAMES = ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", HP2]
SUFFIXES = ["", "m", "k", "Ki", "Mi", "G"]
ALL_OPTIONS = st.builds(ResourceOptions, st.booleans(), st.booleans(), st.booleans(), st.booleans())


@st.composite
def quantity_texts(draw: st.DrawFn) -> str:
    """A non-negative quantity string in one of several suffix families."""
    return f"{draw(st.integers(min_value=0, max_value=10**6))}{draw(st.sampled_from(SUFFIXES))}"


resource_lists = st.dictionaries(st.sampled_from(NAMES), quantity_texts(), max_size=len(NAMES))


@st.composite
def containers(draw: st.DrawFn, *, init: bool = False) -> dict[str, Any]:
    """A container with random requests and limits; init ones may be sidecars."""
    sidecar = draw(st.booleans()) if init else False
    return ctr(requests=draw(resource_lists), limits=draw(resource_lists), sidecar=sidecar)


def decimal_sum(lists: list[Texts]) -> dict[str, Decimal]:
    """Per-resource sum of quantity strings, zeros dropped."""
    total: dict[str, Decimal] = {}
    for texts in lists:
        for name, text in texts.items():
            total[name] = total.get(name, Decimal(0)) + Quantity.parse(text).value
    return {name: amount for name, amount in total.items() if amount}


@settings(max_examples=200)
@given(st.lists(containers(), max_size=5), ALL_OPTIONS)
def test_regular_containers_only_sum(
    regular: list[dict[str, Any]], options: ResourceOptions
) -> None:
    pod = make_pod(containers=regular)
    expected = decimal_sum([c["resources"]["requests"] for c in regular])
    assert values(pod_requests(pod, options=options)) == expected
    assert values(pod_limits(pod, options=options)) == decimal_sum(
        [c["resources"]["limits"] for c in regular]
    )


@settings(max_examples=200)
@given(
    st.lists(containers(), max_size=4),
    st.lists(containers(init=True), max_size=4),
    containers(init=True),
    st.booleans(),
)
def test_adding_a_container_never_lowers(
    regular: list[dict[str, Any]], init: list[dict[str, Any]], extra: dict[str, Any], as_init: bool
) -> None:
    before_pod = make_pod(containers=regular, init=init)
    after_pod = make_pod(containers=[*regular, extra], init=init)
    if as_init:
        after_pod = make_pod(containers=regular, init=[*init, extra])
    for compute in (pod_requests, pod_limits):
        before, after = compute(before_pod), compute(after_pod)
        for name, amount in before.items():
            assert name in after
            assert after[name] >= amount


@settings(max_examples=200)
@given(
    st.lists(containers(), max_size=4), st.lists(containers(init=True), max_size=4), resource_lists
)
def test_overhead_adds_exactly(
    regular: list[dict[str, Any]], init: list[dict[str, Any]], overhead: Texts
) -> None:
    bare = make_pod(containers=regular, init=init)
    loaded = make_pod(containers=regular, init=init, overhead=overhead)
    requests_bare = values(pod_requests(bare))
    expected = decimal_sum([{k: str(v) for k, v in requests_bare.items()}, overhead])
    assert values(pod_requests(loaded)) == expected
    assert (
        values(pod_requests(loaded, options=ResourceOptions(exclude_overhead=True)))
        == requests_bare
    )

    limits_bare = values(pod_limits(bare))
    limits_loaded = values(pod_limits(loaded))
    assert set(limits_loaded) == set(limits_bare)
    for name, amount in limits_bare.items():
        assert limits_loaded[name] == amount + Quantity.parse(overhead.get(name, "0")).value


@settings(max_examples=200)
@given(st.lists(containers(), max_size=4), st.lists(containers(init=True), max_size=4))
def test_requests_bound_every_phase(
    regular: list[dict[str, Any]], init: list[dict[str, Any]]
) -> None:
    pod = make_pod(containers=regular, init=init)
    requests = values(pod_requests(pod))
    sidecars = [c["resources"]["requests"] for c in init if c.get("restartPolicy") == "Always"]
    steady = decimal_sum([c["resources"]["requests"] for c in regular] + sidecars)
    for name, amount in steady.items():
        assert requests[name] >= amount
    for container in init:
        for name, amount in decimal_sum([container["resources"]["requests"]]).items():
            assert requests[name] >= amount


@settings(max_examples=200)
@given(
    st.lists(containers(), max_size=4), st.lists(containers(init=True), max_size=4), resource_lists
)
def test_options_agree_without_status(
    regular: list[dict[str, Any]], init: list[dict[str, Any]], overhead: Texts
) -> None:
    pod = make_pod(containers=regular, init=init, overhead=overhead)
    assert pod_requests(pod) == pod_requests(pod, options=SCHEDULER_METRIC_OPTIONS)
    assert pod_limits(pod) == pod_limits(pod, options=SCHEDULER_METRIC_OPTIONS)


@settings(max_examples=200)
@given(
    st.lists(containers(), min_size=1, max_size=4), st.lists(resource_lists, min_size=1, max_size=4)
)
def test_status_resources_never_lower_requests(
    regular: list[dict[str, Any]], allocated: list[Texts]
) -> None:
    named = [{**c, "name": f"c{i}"} for i, c in enumerate(regular)]
    statuses = [cstat(f"c{i}", allocated=a) for i, a in enumerate(allocated)]
    pod = make_pod(containers=named, statuses=statuses)
    spec_only = pod_requests(pod, options=SCHEDULER_METRIC_OPTIONS)
    with_status = pod_requests(pod)
    for name, amount in spec_only.items():
        assert with_status[name] >= amount


@given(st.lists(containers(), max_size=3), ALL_OPTIONS)
def test_no_zero_values_in_results(regular: list[dict[str, Any]], options: ResourceOptions) -> None:
    pod = make_pod(containers=regular, overhead={"cpu": "0", "memory": "0"})
    for compute in (pod_requests, pod_limits):
        assert all(not amount.is_zero() for amount in compute(pod, options=options).values())
