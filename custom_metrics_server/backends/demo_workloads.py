"""The workloads of the demo cluster: what runs in it and how much each container asks for.

PURE data. This module owns the catalogue :func:`workloads` draws from: Deployments with their
pod templates (a restartable sidecar in `web`, an init container larger than the app in `api`,
pod overhead in `cart`, an extended resource in `worker`) and a high-priority StatefulSet
(`db`), scaled to the requested number of pods. It must not generate objects (that is
:mod:`.demo_world`).

Cost: O(1) (six workloads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Json", "Workload", "resources", "workloads"]

Json = dict[str, Any]


def resources(requests: dict[str, str], limits: dict[str, str] | None = None) -> Json:
    """A container's `resources` (`limits` only when given)."""
    found: Json = {"requests": requests}
    if limits:
        found["limits"] = limits
    return found


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment or StatefulSet of the demo and its pod template."""

    namespace: str
    kind: str
    name: str
    replicas: int
    labels: dict[str, str]
    containers: tuple[Json, ...]
    init_containers: tuple[Json, ...] = ()
    overhead: dict[str, str] | None = None
    priority: int | None = None


def workloads(pods: int, web_pods: int) -> list[Workload]:
    """The workloads and their replica counts for a cluster of `pods` pods."""
    web = max(0, min(web_pods, pods))
    rest = max(0, pods - web)
    db = min(3, rest)
    rest -= db
    shares = {"api": 0.4, "frontend": 0.2, "cart": 0.2, "worker": 0.2}
    counts = {name: int(rest * share) for name, share in shares.items()}
    counts["api"] += rest - sum(counts.values())
    app = "registry.example/demo/"
    return [
        Workload(
            "default",
            "Deployment",
            "web",
            web,
            {"app": "web", "tier": "frontend"},
            (
                {
                    "name": "web",
                    "image": app + "web:1.4",
                    "resources": resources(
                        {"cpu": "250m", "memory": "256Mi"}, {"cpu": "500m", "memory": "512Mi"}
                    ),
                },
            ),
            (
                {
                    "name": "proxy",
                    "image": app + "proxy:2.0",
                    "restartPolicy": "Always",
                    "resources": resources({"cpu": "100m", "memory": "64Mi"}),
                },
            ),
        ),
        Workload(
            "default",
            "Deployment",
            "api",
            counts["api"],
            {"app": "api", "tier": "backend"},
            (
                {
                    "name": "api",
                    "image": app + "api:3.1",
                    "resources": resources({"cpu": "500m", "memory": "512Mi"}, {"memory": "1Gi"}),
                },
            ),
            (
                {
                    "name": "migrate",
                    "image": app + "api:3.1",
                    "resources": resources({"cpu": "1", "memory": "256Mi"}),
                },
            ),
        ),
        Workload(
            "shop",
            "Deployment",
            "frontend",
            counts["frontend"],
            {"app": "frontend", "tier": "frontend"},
            (
                {
                    "name": "frontend",
                    "image": app + "frontend:7",
                    "resources": resources(
                        {"cpu": "200m", "memory": "128Mi"}, {"cpu": "400m", "memory": "256Mi"}
                    ),
                },
            ),
        ),
        Workload(
            "shop",
            "Deployment",
            "cart",
            counts["cart"],
            {"app": "cart", "tier": "backend"},
            (
                {
                    "name": "cart",
                    "image": app + "cart:2",
                    "resources": resources(
                        {"cpu": "300m", "memory": "256Mi"}, {"cpu": "600m", "memory": "256Mi"}
                    ),
                },
            ),
            overhead={"cpu": "50m", "memory": "32Mi"},
        ),
        Workload(
            "shop",
            "StatefulSet",
            "db",
            db,
            {"app": "db", "tier": "data"},
            (
                {
                    "name": "postgres",
                    "image": "postgres:17",
                    "resources": resources(
                        {"cpu": "1", "memory": "2Gi"}, {"cpu": "1", "memory": "2Gi"}
                    ),
                },
            ),
            priority=100000,
        ),
        Workload(
            "batch",
            "Deployment",
            "worker",
            counts["worker"],
            {"app": "worker", "tier": "batch"},
            (
                {
                    "name": "worker",
                    "image": app + "worker:5",
                    "resources": resources(
                        {"cpu": "200m", "memory": "512Mi", "nvidia.com/gpu": "1"},
                        {"nvidia.com/gpu": "1"},
                    ),
                },
            ),
        ),
    ]
