"""Discovery documents: `/apis`, `/apis/{group}` and `/apis/{group}/{version}`.

PURE: builds plain JSON-ready dicts from the served groups and the metrics the backends list.
Shapes follow contract section 4: the root list without `apiVersion` (the Go strip-version
encoder), groups with v1beta2 preferred, resource lists never empty (upstream's placeholder
entries when no backend lists anything) and `namespaced` decided by the resource's scope so
every entry of one parent resource agrees.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from custom_metrics_server.api.grammar import EXTERNAL_GROUP, GROUP_VERSIONS
from custom_metrics_server.domain import MetricInfo


def _version_ref(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}", "version": version}


def api_group(group: str) -> dict[str, Any]:
    """`APIGroup` for one served group, versions in preference order."""
    versions = GROUP_VERSIONS[group]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_version_ref(group, v) for v in versions],
        "preferredVersion": _version_ref(group, versions[0]),
    }


def api_group_list(
    server_address: str, extra_groups: Mapping[str, tuple[str, ...]] | None = None
) -> dict[str, Any]:
    """`APIGroupList` of every served group, as the Go root handler encodes it; groups served
    outside the grammar (`metrics.k8s.io` when enabled) come last."""
    groups = []
    for group, versions in {**GROUP_VERSIONS, **(extra_groups or {})}.items():
        groups.append(
            {
                "name": group,
                "versions": [_version_ref(group, v) for v in versions],
                "preferredVersion": _version_ref(group, versions[0]),
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
                ],
            }
        )
    return {"kind": "APIGroupList", "groups": groups}


def _resource_entry(name: str, *, namespaced: bool, kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["get"],
    }


def custom_resource_list(group: str, version: str, metrics: Iterable[MetricInfo]) -> dict[str, Any]:
    """`APIResourceList` of custom metrics: `<group-resource>/<metric>` entries, sorted."""
    unique = sorted({(str(info.group_resource), info.metric, info.namespaced) for info in metrics})
    resources = [
        _resource_entry(f"{gr}/{metric}", namespaced=namespaced, kind="MetricValueList")
        for gr, metric, namespaced in unique
    ]
    if not resources:
        # Upstream's default provider entry: an empty list makes kubectl warn on every call.
        resources = [_resource_entry("/custommetrics", namespaced=False, kind="MetricValueList")]
    return _resource_list(group, version, resources)


def external_resource_list(metrics: Iterable[str]) -> dict[str, Any]:
    """`APIResourceList` of external metrics (always namespaced, as upstream)."""
    resources = [
        _resource_entry(name, namespaced=True, kind="ExternalMetricValueList")
        for name in sorted(set(metrics))
    ]
    if not resources:
        resources = [
            _resource_entry("externalmetrics", namespaced=True, kind="ExternalMetricValueList")
        ]
    return _resource_list(EXTERNAL_GROUP, "v1beta1", resources)


def _resource_list(group: str, version: str, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": resources,
    }
