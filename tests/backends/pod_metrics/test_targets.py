"""Which pods the pod-metrics backend scrapes, where, and which workloads own them
(`backends/pod_metrics/targets.py`), fed the way its watches feed it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from custom_metrics_server.backends.pod_metrics.settings import PodMetricsSettings
from custom_metrics_server.backends.pod_metrics.targets import PodTargets
from custom_metrics_server.domain import GroupResource

PODS = GroupResource("", "pods")
DEPLOYMENTS = GroupResource("apps", "deployments")
REPLICASETS = GroupResource("apps", "replicasets")
STATEFULSETS = GroupResource("apps", "statefulsets")
JOBS = GroupResource("batch", "jobs")


def targets(**settings: Any) -> PodTargets:
    base: dict[str, Any] = {"metrics": ["requests_total"]}
    base.update(settings)
    return PodTargets(PodMetricsSettings.model_validate(base).to_config())


def pod(
    name: str,
    *,
    namespace: str = "shop",
    labels: dict[str, str] | None = None,
    ip: str = "10.0.0.1",
    phase: str = "Running",
    ports: dict[str, int] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "controller": True},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-a-controller"},
        ]
    return {
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "ports": [{"name": k, "containerPort": v} for k, v in (ports or {}).items()],
                }
            ]
        },
        "status": {"phase": phase, "podIP": ip},
    }


WEB = {"name": "web", "selector": "app=web", "port": 8080}


def test_a_scrape_config_chooses_running_pods_with_an_ip_by_namespace_and_labels() -> None:
    found = targets(scrape=[{**WEB, "namespaces": ["shop"]}])
    found.list_started()
    found.listed(pod("web-0", labels={"app": "web"}))
    found.listed(pod("web-1", labels={"app": "web"}, namespace="other"))
    found.listed(pod("db-0", labels={"app": "db"}))
    found.listed(pod("web-2", labels={"app": "web"}, ip=""))
    found.listed(pod("web-3", labels={"app": "web"}, phase="Pending"))
    found.list_finished()
    assert sorted(found.targets) == ["shop/web-0:8080/metrics"]
    target = found.targets["shop/web-0:8080/metrics"]
    assert (target.address, target.port, target.path, target.scheme, target.config) == (
        "10.0.0.1",
        8080,
        "/metrics",
        "http",
        "web",
    )
    # A pod that stops matching, or running, stops being a target.
    found.event("MODIFIED", pod("web-0", labels={"app": "web"}, phase="Succeeded"))
    assert found.targets == {}
    generation = found.generation
    found.event("ADDED", pod("web-0", labels={"app": "web"}, ip="10.0.0.9"))
    assert found.targets["shop/web-0:8080/metrics"].address == "10.0.0.9"
    assert found.generation > generation
    found.event("DELETED", pod("web-0"))
    assert found.targets == {}


def test_a_named_port_resolves_per_pod_and_a_pod_without_it_is_not_scraped() -> None:
    found = targets(scrape=[{**WEB, "port": "metrics", "path": "/stats", "scheme": "https"}])
    found.event("ADDED", pod("web-0", labels={"app": "web"}, ports={"metrics": 9102}))
    found.event("ADDED", pod("web-1", labels={"app": "web"}, ports={"http": 80}))
    assert list(found.targets) == ["https:shop/web-0:9102/stats"]


def test_two_configs_naming_one_endpoint_scrape_it_once_and_distinct_endpoints_each() -> None:
    found = targets(
        scrape=[
            WEB,
            {"name": "again", "selector": "tier=front", "port": 8080},
            {"name": "sidecar", "port": 9102, "metrics": ["envoy_*"]},
        ]
    )
    found.event("ADDED", pod("web-0", labels={"app": "web", "tier": "front"}))
    assert sorted(found.targets) == ["shop/web-0:8080/metrics", "shop/web-0:9102/metrics"]
    assert found.targets["shop/web-0:8080/metrics"].config == "web"
    assert found.targets["shop/web-0:9102/metrics"].selection.choice("envoy_x") is True
    assert found.targets["shop/web-0:9102/metrics"].selection.choice("requests_total") is False
    assert len(found.pod_targets(("shop", "web-0"))) == 2


def test_annotations_choose_pods_only_when_enabled(caplog: pytest.LogCaptureFixture) -> None:
    opted_in = {
        "custom-metrics-server.io/scrape": "true",
        "custom-metrics-server.io/port": "metrics",
        "custom-metrics-server.io/path": "/custom",
    }
    off = targets(scrape=[WEB])
    off.event("ADDED", pod("app-0", annotations=opted_in, ports={"metrics": 9000}))
    assert off.targets == {}
    on = targets(annotations={"enabled": True})
    on.event("ADDED", pod("app-0", annotations=opted_in, ports={"metrics": 9000}))
    on.event(
        "ADDED", pod("app-1", annotations={**opted_in, "custom-metrics-server.io/scrape": "false"})
    )
    assert list(on.targets) == ["shop/app-0:9000/custom"]
    assert on.targets["shop/app-0:9000/custom"].config == "annotations"
    # Unusable annotations: not scraped, said once per pod.
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            on.event(
                "ADDED",
                pod("bad-0", annotations={**opted_in, "custom-metrics-server.io/port": "nope"}),
            )
        on.event(
            "ADDED",
            pod("bad-1", annotations={**opted_in, "custom-metrics-server.io/scheme": "ftp"}),
        )
        on.event("ADDED", pod("bad-2", annotations={"custom-metrics-server.io/scrape": "true"}))
    assert sorted(on.targets) == ["shop/app-0:9000/custom"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "not scraping pod shop/bad-0: custom-metrics-server.io/port 'nope' is not a port of the pod",
        "not scraping pod shop/bad-1: custom-metrics-server.io/scheme 'ftp' is neither http nor https",
        "not scraping pod shop/bad-2: custom-metrics-server.io/port is missing",
    ]
    # Another prefix, namespaces restricted.
    custom = targets(annotations={"enabled": True, "prefix": "example.com", "namespaces": ["a"]})
    custom.event(
        "ADDED",
        pod(
            "x",
            namespace="a",
            annotations={"example.com/scrape": "true", "example.com/port": "9000"},
        ),
    )
    custom.event(
        "ADDED",
        pod(
            "y",
            namespace="b",
            annotations={"example.com/scrape": "true", "example.com/port": "9000"},
        ),
    )
    assert list(custom.targets) == ["a/x:9000/metrics"]


def test_a_relist_forgets_what_it_no_longer_lists() -> None:
    found = targets(scrape=[WEB])
    found.list_started()
    for name in ("web-0", "web-1"):
        found.listed(pod(name, labels={"app": "web"}))
    found.list_finished()
    assert found.synced
    found.list_started()
    found.listed(pod("web-1", labels={"app": "web"}))
    found.list_finished()
    assert list(found.targets) == ["shop/web-1:8080/metrics"]


def test_workloads_own_pods_through_owner_references() -> None:
    found = targets(scrape=[WEB])
    for index in range(2):
        found.event(
            "ADDED", pod(f"web-a-{index}", labels={"app": "web"}, owner=("ReplicaSet", "web-a"))
        )
    found.event("ADDED", pod("web-b-0", labels={"app": "web"}, owner=("ReplicaSet", "web-b")))
    found.event("ADDED", pod("db-0", labels={"app": "web"}, owner=("StatefulSet", "db")))
    found.event("ADDED", pod("job-x", labels={"app": "web"}, owner=("Job", "migrate")))
    found.event("ADDED", pod("lonely", labels={"app": "web"}))
    replicasets = found.replicasets
    replicasets.list_started()
    for name in ("web-a", "web-b"):  # a rollout: both belong to the Deployment
        replicasets.listed(
            {
                "metadata": {
                    "name": name,
                    "namespace": "shop",
                    "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}],
                }
            }
        )
    replicasets.listed({"metadata": {"name": "bare", "namespace": "shop"}})
    replicasets.list_finished()
    assert found.pods_of(DEPLOYMENTS, ("shop", "web")) == [
        ("shop", "web-a-0"),
        ("shop", "web-a-1"),
        ("shop", "web-b-0"),
    ]
    assert found.pods_of(REPLICASETS, ("shop", "web-b")) == [("shop", "web-b-0")]
    assert found.pods_of(STATEFULSETS, ("shop", "db")) == [("shop", "db-0")]
    assert found.pods_of(JOBS, ("shop", "migrate")) == [("shop", "job-x")]
    assert found.pods_of(PODS, ("shop", "lonely")) == [("shop", "lonely")]
    assert found.pods_of(PODS, ("shop", "nope")) == []
    assert found.pods_of(DEPLOYMENTS, ("other", "web")) == []
    assert found.workloads_of(("shop", "web-a-0")) == [REPLICASETS, DEPLOYMENTS]
    assert found.workloads_of(("shop", "lonely")) == []
    # The old ReplicaSet goes: its pods no longer count for the Deployment.
    replicasets.event("DELETED", {"metadata": {"name": "web-a", "namespace": "shop"}})
    assert found.pods_of(DEPLOYMENTS, ("shop", "web")) == [("shop", "web-b-0")]
    # A pod moved to another controller is filed under it.
    found.event("MODIFIED", pod("web-b-0", labels={"app": "web"}, owner=("ReplicaSet", "web-a")))
    assert found.pods_of(REPLICASETS, ("shop", "web-b")) == []
    assert found.pods_of(REPLICASETS, ("shop", "web-a")) == [
        ("shop", "web-a-0"),
        ("shop", "web-a-1"),
        ("shop", "web-b-0"),
    ]


def test_only_the_configured_workloads_are_served() -> None:
    found = targets(scrape=[WEB], workloads=["statefulsets"])
    found.event("ADDED", pod("web-0", labels={"app": "web"}, owner=("ReplicaSet", "web-a")))
    found.event("ADDED", pod("db-0", labels={"app": "web"}, owner=("StatefulSet", "db")))
    assert found.pods_of(REPLICASETS, ("shop", "web-a")) == []
    assert found.pods_of(STATEFULSETS, ("shop", "db")) == [("shop", "db-0")]
    assert found.workloads_of(("shop", "web-0")) == []
