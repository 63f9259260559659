"""Pod-level resources meeting status resources and in-place resize, against upstream.

Upstream is ``k8s.io/component-helpers/resource`` at commit 1961876b (2026-07-24), read as
kubernetes/kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go`` (that exact
component-helpers commit is not in the stored index; the module docstring of
``custom_metrics_server.resources.model`` says how the state at that date was pinned). Three
kinds of test live here:

* ported tables: ``TestIsSupportedPodLevelResource`` and the cases of pull request
  kubernetes/kubernetes#140481 (open at 1961876b, so not yet upstream's behaviour), each row
  naming the upstream case;
* a differential test: :func:`reference_requests` / :func:`reference_limits` transcribe
  ``PodRequests``/``PodLimits`` at 1961876b line by line (maps of Decimals, Go's nil vs empty
  kept apart) and Hypothesis generates pods around pod-level resources, pod and container
  status resources, ``PodResizePending`` and every option combination;
* properties that must hold whatever the pod (pod-level requests win for supported
  resources, the aggregate without pod-level or status fields, the option gates, the HPA's
  view).

The other upstream tables (TestPodResourceRequests, TestPodLevelResourceRequests, ...) are in
``tests/resources/test_model.py``, each row with a ``# upstream`` comment naming its case.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.resources.model import (
    DEFAULT_OPTIONS,
    HPA_POD_LEVEL_OPTIONS,
    SCHEDULER_METRIC_OPTIONS,
    ResourceOptions,
    hpa_pod_requests,
    is_supported_pod_level_resource,
    pod_limits,
    pod_requests,
)
from tests.resources.test_model import (
    INFEASIBLE,
    Pod,
    Texts,
    cstat,
    ctr,
    go_opts,
    make_pod,
    qs,
    values,
)

Decimals = dict[str, Decimal]
STATUS = go_opts(status=True, plr=True)
OVERHEAD = {"cpu": "100m", "memory": "10Mi"}
POD_LEVEL = {"requests": {"cpu": "1", "memory": "100Mi"}}


# --- TestIsSupportedPodLevelResource ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("cpu", True, id="cpu"),  # upstream: v1.ResourceCPU.String()
        pytest.param("memory", True, id="memory"),  # upstream: v1.ResourceMemory.String()
        # upstream: v1.ResourceEphemeralStorage.String()
        pytest.param("ephemeral-storage", False, id="ephemeral-storage"),
        pytest.param("hugepages-2Mi", True, id="hugepages-2Mi"),  # upstream: "hugepages-2Mi"
        pytest.param("hugepages-1Gi", True, id="hugepages-1Gi"),  # upstream: "hugepages-1Gi"
        # ours: the other names a pod may carry are not pod-level resources at 1961876b
        pytest.param("nvidia.com/gpu", False, id="extended"),
        pytest.param("storage", False, id="storage"),
        pytest.param("pods", False, id="pods"),
    ],
)
def test_is_supported_pod_level_resource(name: str, expected: bool) -> None:
    assert is_supported_pod_level_resource(name) is expected


# --- kubernetes/kubernetes#140481 (open at 1961876b) -------------------------------------------
#
# The pull request stops the overhead being counted twice when the kubelet's pod-level status
# (which includes spec.overhead) wins, and lets status.allocatedResources alone open the status
# branch. Its test rows are ported with both numbers: ``pr`` is what the pull request's test
# states, ``at_commit`` what PodRequests/PodLimits return at 1961876b (and this port returns).
# When the pull request lands upstream, ``pr`` becomes the expectation.


def plr(
    *,
    pod_resources: dict[str, Texts] | None = None,
    overhead: Texts | None = None,
    status_requests: Texts | None = None,
    status_limits: Texts | None = None,
    allocated: Texts | None = None,
    containers: list[dict[str, Any]] | None = None,
) -> Pod:
    status: dict[str, Texts] | None = None
    if status_requests is not None or status_limits is not None:
        status = {}
        if status_requests is not None:
            status["requests"] = status_requests
        if status_limits is not None:
            status["limits"] = status_limits
    return make_pod(
        pod_resources=POD_LEVEL if pod_resources is None else pod_resources,
        overhead=overhead,
        containers=containers,
        status_resources=status,
        status_allocated=allocated,
    )


PR_140481_REQUESTS = [
    pytest.param(
        # upstream TestPodLevelResourceRequests (PR): "status resources include overhead for all
        # pod-level resources"
        plr(
            overhead=OVERHEAD,
            status_requests={"cpu": "1100m", "memory": "110Mi"},
            allocated={"cpu": "1100m", "memory": "110Mi"},
        ),
        {"cpu": "1100m", "memory": "110Mi"},
        {"cpu": "1200m", "memory": "120Mi"},
        id="status-includes-overhead-for-all",
    ),
    pytest.param(
        # upstream TestPodLevelResourceRequests (PR): "status resources include overhead for only
        # one pod-level resource"
        plr(overhead=OVERHEAD, status_requests={"cpu": "1100m"}, allocated={"cpu": "1100m"}),
        {"cpu": "1100m", "memory": "110Mi"},
        {"cpu": "1200m", "memory": "110Mi"},
        id="status-includes-overhead-for-one",
    ),
    pytest.param(
        # upstream TestPodLevelResourceRequests (PR): "status resources without overhead still
        # receive overhead"
        plr(
            overhead=OVERHEAD,
            status_requests={"cpu": "1", "memory": "100Mi"},
            allocated={"cpu": "1", "memory": "100Mi"},
        ),
        {"cpu": "1100m", "memory": "110Mi"},
        {"cpu": "1100m", "memory": "110Mi"},
        id="status-without-overhead-still-gets-overhead",
    ),
    pytest.param(
        # upstream TestPodLevelResourceRequests (PR): "allocated resources include overhead when
        # status requests do not"
        plr(
            overhead=OVERHEAD,
            status_requests={"cpu": "1", "memory": "100Mi"},
            allocated={"cpu": "1100m", "memory": "110Mi"},
        ),
        {"cpu": "1100m", "memory": "110Mi"},
        {"cpu": "1200m", "memory": "120Mi"},
        id="allocated-includes-overhead-status-does-not",
    ),
    pytest.param(
        # upstream TestPodLevelResourceRequests (PR): "allocated resources include stale overhead
        # during resize"
        plr(
            overhead=OVERHEAD,
            status_requests={"cpu": "1", "memory": "100Mi"},
            allocated={"cpu": "1050m", "memory": "105Mi"},
        ),
        {"cpu": "1100m", "memory": "110Mi"},
        {"cpu": "1150m", "memory": "115Mi"},
        id="allocated-includes-stale-overhead",
    ),
]


@pytest.mark.parametrize(("pod", "pr", "at_commit"), PR_140481_REQUESTS)
def test_pr_140481_pod_level_requests(pod: Pod, pr: Texts, at_commit: Texts) -> None:
    got = values(pod_requests(pod, options=STATUS))
    assert got == values(qs(at_commit))
    # What differs is the overhead the status already held, never more than the overhead.
    for name, value in values(qs(pr)).items():
        assert Decimal(0) <= got[name] - value <= values(qs(OVERHEAD))[name]


PR_140481_WRAPPERS = [
    pytest.param(
        # upstream TestPodRequestsAndLimitsVerticalScalingWrappers (PR): "pod level
        # requests/limits with PLR vertical scaling enabled, status.resources nil,
        # status.allocatedResources set"
        plr(
            pod_resources={"requests": {"cpu": "2"}, "limits": {"cpu": "4"}},
            containers=[ctr("c1", {"cpu": "1"}, {"cpu": "2"})],
            allocated={"cpu": "3"},
        ),
        ({"cpu": "3"}, {"cpu": "4"}),
        # status.resources is nil: the status branch stays closed, the spec's 2 wins.
        ({"cpu": "2"}, {"cpu": "4"}),
        id="only-allocated",
    ),
    pytest.param(
        # upstream TestPodRequestsAndLimitsVerticalScalingWrappers (PR): "pod level
        # requests/limits with PLR vertical scaling enabled, overhead set, and status populated"
        plr(
            pod_resources={
                "requests": {"cpu": "2", "memory": "2Gi"},
                "limits": {"cpu": "4", "memory": "4Gi"},
            },
            overhead={"cpu": "1", "memory": "500Mi"},
            status_requests={"cpu": "3", "memory": "2.5Gi"},
            status_limits={"cpu": "5", "memory": "4.5Gi"},
            allocated={"cpu": "3", "memory": "2.5Gi"},
        ),
        ({"cpu": "3", "memory": "2.5Gi"}, {"cpu": "5", "memory": "4.5Gi"}),
        ({"cpu": "4", "memory": "3060Mi"}, {"cpu": "6", "memory": "5108Mi"}),
        id="overhead-and-status",
    ),
]


@pytest.mark.parametrize(("pod", "pr", "at_commit"), PR_140481_WRAPPERS)
def test_pr_140481_wrappers(
    pod: Pod, pr: tuple[Texts, Texts], at_commit: tuple[Texts, Texts]
) -> None:
    assert values(pod_requests(pod, options=STATUS)) == values(qs(at_commit[0]))
    assert values(pod_limits(pod, options=STATUS)) == values(qs(at_commit[1]))
    assert (values(qs(pr[0])), values(qs(pr[1]))) != (
        values(qs(at_commit[0])),
        values(qs(at_commit[1])),
    )


# --- Pod-level meets status: the combinations the paths branch on --------------------------

COMBINED_CASES = [
    pytest.param(
        plr(status_requests={"cpu": "2"}, allocated={"cpu": "1500m"}),
        go_opts(status=True),
        {"cpu": "1", "memory": "100Mi"},
        id="plr-option-off-status-ignored",
    ),
    pytest.param(
        plr(status_requests={"cpu": "2"}, allocated={"cpu": "1500m"}),
        go_opts(plr=True),
        {"cpu": "1", "memory": "100Mi"},
        id="status-option-off-status-ignored",
    ),
    pytest.param(
        plr(status_requests={"cpu": "2"}, allocated={"cpu": "1500m"}),
        STATUS,
        {"cpu": "2", "memory": "100Mi"},
        id="actual-above-spec-wins",
    ),
    pytest.param(
        plr(status_requests={"cpu": "500m"}, allocated={"cpu": "1500m"}),
        STATUS,
        {"cpu": "1500m", "memory": "100Mi"},
        id="allocated-above-spec-wins",
    ),
    pytest.param(
        make_pod(
            pod_resources=POD_LEVEL,
            conditions=INFEASIBLE,
            status_resources={"requests": {"cpu": "500m"}},
            status_allocated={"cpu": "600m"},
        ),
        STATUS,
        # Infeasible: the spec is ignored, max(actual, allocated) for cpu; memory has no status
        # value and no spec, so only the (empty) container aggregate is left.
        {"cpu": "600m"},
        id="infeasible-spec-ignored",
    ),
    pytest.param(
        make_pod(
            pod_resources=POD_LEVEL,
            conditions=INFEASIBLE,
            status_allocated={"cpu": "600m"},
            containers=[ctr("c", {"cpu": "1"})],
            statuses=[cstat("c", allocated={"cpu": "300m"})],
        ),
        STATUS,
        # No status.resources: the pod-level branch keeps the spec even though infeasible;
        # the container aggregate (infeasible: max(actual, allocated) = 300m) is replaced.
        {"cpu": "1", "memory": "100Mi"},
        id="infeasible-without-status-resources-keeps-spec",
    ),
    pytest.param(
        make_pod(
            pod_resources={"requests": {"memory": "1Gi", "ephemeral-storage": "5Gi"}},
            containers=[ctr("c", {"cpu": "250m", "ephemeral-storage": "1Gi"})],
            statuses=[cstat("c", allocated={"cpu": "400m"}, requests={"cpu": "300m"})],
            status_resources={"requests": {"memory": "2Gi", "ephemeral-storage": "9Gi"}},
        ),
        STATUS,
        # memory: max(spec 1Gi, actual 2Gi); cpu from containers (max of spec, actual,
        # allocated); ephemeral-storage is no pod-level resource: the containers' sum stays.
        {"memory": "2Gi", "cpu": "400m", "ephemeral-storage": "1Gi"},
        id="mixed-levels-with-container-resize",
    ),
    pytest.param(
        make_pod(
            pod_resources={"requests": {"cpu": "1"}},
            overhead={"cpu": "250m"},
            status_resources={"requests": {"cpu": "1250m"}},
            status_allocated={"cpu": "1250m"},
        ),
        STATUS,
        # The kubelet's pod-level status includes the overhead: counted twice at 1961876b.
        {"cpu": "1500m"},
        id="overhead-counted-twice-at-commit",
    ),
]


@pytest.mark.parametrize(("pod", "options", "expected"), COMBINED_CASES)
def test_pod_level_meets_status(pod: Pod, options: ResourceOptions, expected: Texts) -> None:
    assert values(pod_requests(pod, options=options)) == values(qs(expected))


def test_pod_level_limits_with_status_and_overhead() -> None:
    pod = make_pod(
        pod_resources={"limits": {"cpu": "2", "memory": "1Gi"}},
        overhead={"cpu": "100m", "memory": "64Mi"},
        containers=[ctr("c", limits={"cpu": "1", "ephemeral-storage": "1Gi"})],
        status_resources={"limits": {"cpu": "3"}},
    )
    # cpu: max(spec 2, actual 3) + overhead; memory: spec + overhead; unsupported stays.
    expected = {"cpu": "3100m", "memory": "1088Mi", "ephemeral-storage": "1Gi"}
    assert values(pod_limits(pod, options=STATUS)) == values(qs(expected))
    infeasible = copy.deepcopy(pod)
    infeasible["status"]["conditions"] = INFEASIBLE
    # Infeasible: the specs are ignored at both levels. The container aggregate is the pod's
    # status.resources.limits alone (so the containers' ephemeral-storage goes), and memory has
    # no status value to replace the spec's.
    assert values(pod_limits(infeasible, options=STATUS)) == values(qs({"cpu": "3100m"}))


# --- A transcription of upstream at 1961876b -----------------------------------------------------
#
# Written straight from helpers.go, names and structure kept, so a reader can hold the two side
# by side. A Go nil map is None here, an empty map {}; zero values are kept (the comparison drops
# them, as the port does).

Obj = Mapping[str, Any]


def _rl(value: object) -> Decimals | None:
    if value is None:
        return None
    assert isinstance(value, Mapping)
    return {str(k): Quantity.parse(str(v)).value for k, v in value.items()}


def _add(target: Decimals, extra: Decimals | None) -> None:
    for name, amount in (extra or {}).items():
        target[name] = target.get(name, Decimal(0)) + amount


def _max_into(target: Decimals, extra: Decimals | None) -> None:
    for name, amount in (extra or {}).items():
        if name not in target or amount > target[name]:
            target[name] = amount


def _max(first: Decimals | None, *others: Decimals | None) -> Decimals:
    result = dict(first) if first is not None else {}
    for other in others:
        _max_into(result, other)
    return result


def _infeasible(pod: Obj) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _find_status(pod: Obj, name: str) -> Obj | None:
    status = pod.get("status") or {}
    for field in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(field) or []:
            if entry.get("name", "") == name:
                return entry  # type: ignore[no-any-return]
    return None


def _cs_resources(cs: Obj | None, kind: str) -> Decimals | None:
    """cs.Resources.{Requests,Limits}, None when cs, Resources or the list is nil."""
    if cs is None or cs.get("resources") is None:
        return None
    return _rl(cs["resources"].get(kind))


def _spec(c: Obj, kind: str) -> Decimals | None:
    return _rl((c.get("resources") or {}).get(kind))


def container_spec_requests(c: Obj, cs: Obj | None, infeasible: bool) -> Decimals | None:
    return _spec(c, "requests")


def container_allocated_requests(c: Obj, cs: Obj | None, infeasible: bool) -> Decimals | None:
    if cs is not None and cs.get("allocatedResources") is not None:
        return _rl(cs["allocatedResources"])
    return None if infeasible else _spec(c, "requests")


def container_actuated_requests(c: Obj, cs: Obj | None, infeasible: bool) -> Decimals | None:
    actual = _cs_resources(cs, "requests")
    if actual is not None:
        return actual
    if cs is not None and cs.get("allocatedResources") is not None:
        return _rl(cs["allocatedResources"])
    return None if infeasible else _spec(c, "requests")


def container_spec_limits(c: Obj, cs: Obj | None, infeasible: bool) -> Decimals | None:
    return _spec(c, "limits")


def container_actuated_limits(c: Obj, cs: Obj | None, infeasible: bool) -> Decimals | None:
    actual = _cs_resources(cs, "limits")
    if actual is not None:
        return actual
    return None if infeasible else _spec(c, "limits")


def aggregate_by_fn(pod: Obj, opts: ResourceOptions, fn: Any) -> Decimals:
    infeasible = _infeasible(pod) if opts.use_status_resources else False
    spec = pod.get("spec") or {}
    result: Decimals = {}
    for c in spec.get("containers") or []:
        cs = _find_status(pod, c.get("name", "")) if opts.use_status_resources else None
        _add(result, fn(c, cs, infeasible))
    restartable: Decimals = {}
    init: Decimals = {}
    for c in spec.get("initContainers") or []:
        cs = _find_status(pod, c.get("name", "")) if opts.use_status_resources else None
        resources = fn(c, cs, infeasible)
        if c.get("restartPolicy") == "Always":
            _add(result, resources)
            _add(restartable, resources)
            resources = restartable
        else:
            combined: Decimals = {}
            _add(combined, resources)
            _add(combined, restartable)
            resources = combined
        _max_into(init, resources)
    _max_into(result, init)
    return result


def aggregate_container_requests(pod: Obj, opts: ResourceOptions) -> Decimals:
    if not opts.use_status_resources:
        return aggregate_by_fn(pod, opts, container_spec_requests)
    status = pod.get("status") or {}
    infeasible = _infeasible(pod)
    spec_reqs = aggregate_by_fn(pod, opts, container_spec_requests)
    pod_status = status.get("resources")
    if (
        opts.pod_level_status_resources
        and status.get("allocatedResources") is not None
        and pod_status is not None
        and pod_status.get("requests") is not None
    ):
        allocated = _rl(status["allocatedResources"])
        actuated = _rl(pod_status["requests"])
    else:
        allocated = aggregate_by_fn(pod, opts, container_allocated_requests)
        actuated = aggregate_by_fn(pod, opts, container_actuated_requests)
    if infeasible:
        return _max(actuated, allocated)
    return _max(spec_reqs, actuated, allocated)


def aggregate_container_limits(pod: Obj, opts: ResourceOptions) -> Decimals:
    if not opts.use_status_resources:
        return aggregate_by_fn(pod, opts, container_spec_limits)
    status = pod.get("status") or {}
    infeasible = _infeasible(pod)
    spec_limits = aggregate_by_fn(pod, opts, container_spec_limits)
    pod_status = status.get("resources")
    if (
        opts.pod_level_status_resources
        and pod_status is not None
        and pod_status.get("limits") is not None
    ):
        actuated = _rl(pod_status["limits"]) or {}
    else:
        actuated = aggregate_by_fn(pod, opts, container_actuated_limits)
    if infeasible:
        return dict(actuated)
    return _max(spec_limits, actuated)


def _pod_level(pod: Obj, kind: str) -> Decimals | None:
    resources = (pod.get("spec") or {}).get("resources")
    return None if resources is None else _rl(resources.get(kind))


def _any_supported(values: Decimals | None) -> bool:
    return any(is_supported_pod_level_resource(name) for name in values or {})


def _effective(pod: Obj, spec: Decimals | None, *statuses: Decimals | None) -> Decimals:
    return _max(None if _infeasible(pod) else spec, *statuses)


def _apply(result: Decimals, effective: Decimals | None) -> None:
    for name, amount in (effective or {}).items():
        if is_supported_pod_level_resource(name):
            result[name] = amount


def reference_requests(pod: Obj, opts: ResourceOptions) -> Decimals:
    """PodRequests at 1961876b (SkipContainerLevelResources and DRA off)."""
    reqs = aggregate_container_requests(pod, opts)
    spec_requests = _pod_level(pod, "requests")
    status = pod.get("status") or {}
    if not opts.skip_pod_level_resources and _any_supported(spec_requests):
        effective = spec_requests
        pod_status = status.get("resources")
        if opts.pod_level_status_resources and opts.use_status_resources and pod_status is not None:
            effective = _effective(
                pod,
                spec_requests,
                _rl(pod_status.get("requests")),
                _rl(status.get("allocatedResources")),
            )
        _apply(reqs, effective)
    overhead = _rl((pod.get("spec") or {}).get("overhead"))
    if not opts.exclude_overhead and overhead is not None:
        _add(reqs, overhead)
    return reqs


def reference_limits(pod: Obj, opts: ResourceOptions) -> Decimals:
    """PodLimits at 1961876b."""
    limits = aggregate_container_limits(pod, opts)
    status = pod.get("status") or {}
    spec_limits = _pod_level(pod, "limits")
    if not opts.skip_pod_level_resources and (
        _any_supported(_pod_level(pod, "requests")) or _any_supported(spec_limits)
    ):
        effective = spec_limits
        pod_status = status.get("resources")
        if opts.pod_level_status_resources and opts.use_status_resources and pod_status is not None:
            effective = _effective(pod, spec_limits, _rl(pod_status.get("limits")))
        _apply(limits, effective)
    overhead = _rl((pod.get("spec") or {}).get("overhead"))
    if not opts.exclude_overhead and overhead is not None:
        for name, amount in overhead.items():
            if name in limits and limits[name] != 0:
                limits[name] += amount
    return limits


def nonzero(found: Decimals) -> Decimals:
    return {name: value for name, value in found.items() if value != 0}


# --- Generated pods --------------------------------------------------------------------------

NAMES = ("cpu", "memory", "hugepages-2Mi", "ephemeral-storage")
AMOUNT = {
    "cpu": st.sampled_from(["0", "100m", "250m", "500m", "1", "1500m", "2", "3"]),
    "memory": st.sampled_from(["0", "64Mi", "100Mi", "128Mi", "1Gi", "1536Mi"]),
    "hugepages-2Mi": st.sampled_from(["0", "2Mi", "4Mi", "10Mi"]),
    "ephemeral-storage": st.sampled_from(["1Gi", "2Gi", "5Gi"]),
}
CONTAINER_NAMES = ("a", "b", "c", "d")


@st.composite
def resource_lists(draw: st.DrawFn, names: tuple[str, ...] = NAMES) -> Texts | None:
    """None (the field absent), {} (present and empty) or some resources."""
    if draw(st.integers(0, 5)) == 0:
        return None
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=len(names)))
    return {name: draw(AMOUNT[name]) for name in chosen}


@st.composite
def pods(draw: st.DrawFn) -> Pod:
    """Pods around the paths where pod-level resources meet status resources and resize."""
    names = list(draw(st.permutations(CONTAINER_NAMES)))
    n_regular = draw(st.integers(1, 2))
    n_init = draw(st.integers(0, 2))
    regular, init = names[:n_regular], names[n_regular : n_regular + n_init]

    def container(name: str, sidecar: bool) -> dict[str, Any]:
        return ctr(name, draw(resource_lists()), draw(resource_lists()), sidecar=sidecar)

    containers = [container(name, False) for name in regular]
    inits = [container(name, draw(st.booleans())) for name in init]

    def statuses(names: list[str]) -> list[dict[str, Any]]:
        found = []
        for name in names:
            if draw(st.booleans()):
                resources = draw(st.sampled_from(["none", "empty", "requests", "limits", "both"]))
                entry = cstat(
                    name,
                    allocated=draw(resource_lists()),
                    requests=draw(resource_lists()) if resources in ("requests", "both") else None,
                    limits=draw(resource_lists()) if resources in ("limits", "both") else None,
                )
                if resources == "empty":
                    entry["resources"] = {}
                found.append(entry)
        return found

    pod_resources = None
    if draw(st.integers(0, 3)):
        pod_resources = {}
        for kind in ("requests", "limits"):
            found = draw(resource_lists())
            if found is not None:
                pod_resources[kind] = found
    status_resources = None
    if draw(st.booleans()):
        status_resources = {}
        for kind in ("requests", "limits"):
            found = draw(resource_lists())
            if found is not None:
                status_resources[kind] = found
    condition = draw(st.sampled_from([None, "Infeasible", "Deferred"]))
    conditions = None
    if condition is not None:
        conditions = [{"type": "PodResizePending", "status": "True", "reason": condition}]
        if draw(st.booleans()):
            conditions.insert(0, {"type": "Ready", "status": "True"})
    overhead = draw(resource_lists(("cpu", "memory")))
    return make_pod(
        containers=containers,
        init=inits or None,
        overhead=overhead,
        pod_resources=pod_resources,
        statuses=statuses(regular) or None,
        init_statuses=statuses(init) or None,
        conditions=conditions,
        status_resources=status_resources,
        status_allocated=draw(resource_lists()),
    )


OPTIONS = st.builds(
    ResourceOptions,
    use_status_resources=st.booleans(),
    pod_level_status_resources=st.booleans(),
    skip_pod_level_resources=st.booleans(),
    exclude_overhead=st.booleans(),
)

# The pod of the issue's kind: pod-level requests, pod and container status, infeasible.
ISSUE_POD = make_pod(
    pod_resources={"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "3"}},
    overhead={"cpu": "100m"},
    containers=[ctr("a", {"cpu": "1", "memory": "512Mi"}, {"cpu": "2"})],
    statuses=[cstat("a", allocated={"cpu": "1500m"}, requests={"cpu": "1"}, limits={"cpu": "2"})],
    conditions=INFEASIBLE,
    status_resources={"requests": {"cpu": "1600m"}, "limits": {"cpu": "2600m"}},
    status_allocated={"cpu": "1600m", "memory": "1Gi"},
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), options=OPTIONS)
@example(pod=ISSUE_POD, options=DEFAULT_OPTIONS)
@example(pod=ISSUE_POD, options=SCHEDULER_METRIC_OPTIONS)
def test_requests_and_limits_agree_with_upstream_transcription(
    pod: Pod, options: ResourceOptions
) -> None:
    assert values(pod_requests(pod, options=options)) == nonzero(reference_requests(pod, options))
    assert values(pod_limits(pod, options=options)) == nonzero(reference_limits(pod, options))


# --- Properties --------------------------------------------------------------------------


def _without(pod: Pod, *paths: tuple[str, str]) -> Pod:
    trimmed = copy.deepcopy(pod)
    for section, field in paths:
        trimmed.get(section, {}).pop(field, None)
    return trimmed


def container_aggregate(pod: Pod, kind: str) -> Decimals:
    """max(sum of containers and sidecars, peak of each init phase): the KEP-753 formula."""
    spec = pod["spec"]

    def own(container: Mapping[str, Any]) -> Decimals:
        return {k: Quantity.parse(v).value for k, v in container["resources"].get(kind, {}).items()}

    total: Decimals = {}
    for container in spec["containers"]:
        _add(total, own(container))
    sidecars: Decimals = {}
    peak: Decimals = {}
    for container in spec.get("initContainers", []):
        if container.get("restartPolicy") == "Always":
            _add(total, own(container))
            _add(sidecars, own(container))
            _max_into(peak, sidecars)
        else:
            phase = dict(sidecars)
            _add(phase, own(container))
            _max_into(peak, phase)
    _max_into(total, peak)
    return total


@settings(max_examples=200, deadline=None)
@given(pod=pods(), options=OPTIONS)
def test_without_pod_level_or_status_the_result_is_the_container_aggregate(
    pod: Pod, options: ResourceOptions
) -> None:
    bare = _without(pod, ("spec", "resources"))
    bare["status"] = {}
    requests = container_aggregate(bare, "requests")
    if not options.exclude_overhead:
        _add(requests, _rl(bare["spec"].get("overhead")))
    assert values(pod_requests(bare, options=options)) == nonzero(requests)
    # Every other option agrees when there is nothing pod-level and nothing in the status.
    same = ResourceOptions(exclude_overhead=options.exclude_overhead)
    assert pod_requests(bare, options=options) == pod_requests(bare, options=same)
    assert pod_limits(bare, options=options) == pod_limits(bare, options=same)


@st.composite
def pods_with_pod_level_requests(draw: st.DrawFn) -> Pod:
    """A generated pod whose spec.resources.requests names at least one supported resource."""
    pod = draw(pods())
    requests = {"cpu": draw(AMOUNT["cpu"])} if draw(st.booleans()) else {}
    requests |= draw(resource_lists()) or {}
    if not _any_supported(_rl(requests)):
        requests["memory"] = draw(AMOUNT["memory"])
    pod["spec"].setdefault("resources", {})["requests"] = requests
    return pod


@settings(max_examples=200, deadline=None)
@given(pod=pods_with_pod_level_requests(), options=OPTIONS)
def test_pod_level_requests_win_for_supported_resources(pod: Pod, options: ResourceOptions) -> None:
    spec_level = _rl(pod["spec"]["resources"]["requests"]) or {}
    assume(not options.skip_pod_level_resources)
    # Without the status branch (either option off), a supported pod-level value replaces the
    # containers' for its resource, overhead added on top.
    no_status = ResourceOptions(
        use_status_resources=options.use_status_resources,
        pod_level_status_resources=False,
        exclude_overhead=options.exclude_overhead,
    )
    got = values(pod_requests(pod, options=no_status))
    overhead = {} if options.exclude_overhead else _rl(pod["spec"].get("overhead")) or {}
    for name, amount in spec_level.items():
        if is_supported_pod_level_resource(name):
            assert got.get(name, Decimal(0)) == amount + overhead.get(name, Decimal(0))
    # Unsupported pod-level names change nothing.
    unsupported_only = copy.deepcopy(pod)
    unsupported_only["spec"]["resources"]["requests"] = {
        k: v
        for k, v in pod["spec"]["resources"]["requests"].items()
        if not is_supported_pod_level_resource(k)
    }
    unsupported_only["spec"]["resources"].pop("limits", None)
    assert pod_requests(unsupported_only, options=options) == pod_requests(
        _without(unsupported_only, ("spec", "resources")), options=options
    )


@settings(max_examples=200, deadline=None)
@given(pod=pods(), options=OPTIONS)
def test_pod_status_is_read_only_with_both_options(pod: Pod, options: ResourceOptions) -> None:
    # InPlacePodLevelResourcesVerticalScaling gates the pod-level status: without it (or without
    # UseStatusResources) status.resources and status.allocatedResources change nothing.
    assume(not (options.use_status_resources and options.pod_level_status_resources))
    trimmed = _without(pod, ("status", "resources"), ("status", "allocatedResources"))
    assert pod_requests(pod, options=options) == pod_requests(trimmed, options=options)
    assert pod_limits(pod, options=options) == pod_limits(trimmed, options=options)


@settings(max_examples=200, deadline=None)
@given(pod=pods())
def test_the_spec_only_options_ignore_the_whole_status(pod: Pod) -> None:
    trimmed = copy.deepcopy(pod)
    trimmed["status"] = {}
    assert pod_requests(pod, options=SCHEDULER_METRIC_OPTIONS) == pod_requests(
        trimmed, options=SCHEDULER_METRIC_OPTIONS
    )
    assert pod_limits(pod, options=SCHEDULER_METRIC_OPTIONS) == pod_limits(
        trimmed, options=SCHEDULER_METRIC_OPTIONS
    )


@settings(max_examples=200, deadline=None)
@given(pod=pods())
def test_a_feasible_container_resize_never_lowers_requests_below_the_spec(pod: Pod) -> None:
    # Without pod-level resources the status only enters through max(spec, actual, allocated).
    # (With them, a pod-level status value replaces the aggregate for its resource, even below
    # the spec: upstream does that too, as the transcription test shows.)
    assume(not any(c.get("reason") == "Infeasible" for c in pod["status"].get("conditions", [])))
    pod = _without(pod, ("spec", "resources"))
    with_status = values(pod_requests(pod))
    spec_only = values(pod_requests(pod, options=SCHEDULER_METRIC_OPTIONS))
    for name, amount in spec_only.items():
        assert with_status.get(name, Decimal(0)) >= amount


# --- The HPA's view ------------------------------------------------------------------------


def hpa_reference(pod: Pod) -> Decimals:
    """calculateRequests (no container named): pod-level path or container sum, in millis."""
    spec = pod["spec"]
    if _any_supported(_rl((spec.get("resources") or {}).get("requests"))):
        full = reference_requests(pod, HPA_POD_LEVEL_OPTIONS)
        return {k: Decimal(Quantity(v).milli_value()) / 1000 for k, v in full.items()}
    counted = list(spec["containers"]) + [
        c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"
    ]
    found: Decimals = {}
    for name in {n for c in counted for n in c["resources"].get("requests", {})}:
        millis = []
        for c in counted:
            text = c["resources"].get("requests", {}).get(name)
            if text is None:
                break  # "missing request for <name> in container ...": no value
            millis.append(Quantity.parse(text).milli_value())
        else:
            found[name] = Decimal(sum(millis)) / 1000
    return found


HPA_CASES = [
    pytest.param(
        make_pod(
            overhead={"cpu": "250m"},
            init=[ctr("init", {"cpu": "4"}), ctr("proxy", {"cpu": "100m"}, sidecar=True)],
            containers=[ctr("app", {"cpu": "500m", "memory": "1Gi"})],
        ),
        {"cpu": "600m"},  # app + sidecar; no init peak, no overhead; memory missing on proxy
        {"cpu": "4250m", "memory": "1Gi"},  # KEP-1748: max(init 4, app + proxy) + 250m
        id="containers-path",
    ),
    pytest.param(
        make_pod(
            overhead={"cpu": "250m", "memory": "64Mi"},
            pod_resources={"requests": {"memory": "2Gi"}},
            init=[ctr("init", {"cpu": "4"})],
            containers=[ctr("app", {"cpu": "500m", "memory": "1Gi"})],
        ),
        {"cpu": "4", "memory": "2Gi"},  # PodRequests{ExcludeOverhead}: init peak counts here
        {"cpu": "4250m", "memory": "2112Mi"},
        id="pod-level-path",
    ),
    pytest.param(
        make_pod(
            containers=[ctr("app", {"cpu": "1"})],
            statuses=[cstat("app", allocated={"cpu": "2"}, requests={"cpu": "2"})],
        ),
        {"cpu": "1"},  # the HPA reads the spec, not the resize status
        {"cpu": "2"},
        id="resize-status-ignored",
    ),
    pytest.param(
        make_pod(containers=[ctr("app", {"cpu": "100u"}), ctr("log", {"cpu": "100u"})]),
        {"cpu": "2m"},  # MilliValue rounds each container up to a millicore
        {"cpu": "200u"},
        id="milli-rounding",
    ),
]


@pytest.mark.parametrize(("pod", "hpa", "kep"), HPA_CASES)
def test_hpa_view(pod: Pod, hpa: Texts, kep: Texts) -> None:
    assert values(hpa_pod_requests(pod)) == values(qs(hpa))
    assert values(pod_requests(pod)) == values(qs(kep))


@settings(max_examples=300, deadline=None)
@given(pod=pods())
def test_hpa_view_agrees_with_its_transcription(pod: Pod) -> None:
    assert values(hpa_pod_requests(pod)) == nonzero(hpa_reference(pod))
    # Neither the overhead nor anything in the status moves the HPA's denominator.
    bare = _without(pod, ("spec", "overhead"))
    bare["status"] = {}
    assert hpa_pod_requests(bare) == hpa_pod_requests(pod)
