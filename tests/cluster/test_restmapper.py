"""REST mapping of `{resource}` strings with Kubernetes lookup rules."""

from __future__ import annotations

import random

import pytest

from custom_metrics_server.cluster.restmapper import BUILTIN_MAPPINGS, RestMapper
from custom_metrics_server.domain import GroupResource, ResourceMapping

MAPPER = RestMapper(BUILTIN_MAPPINGS)


@pytest.mark.parametrize(
    ("text", "kind", "api_version", "namespaced"),
    [
        ("pods", "Pod", "v1", True),
        ("pod", "Pod", "v1", True),
        ("PODS", "Pod", "v1", True),
        ("nodes", "Node", "v1", False),
        ("deployments.apps", "Deployment", "apps/v1", True),
        ("deployment.apps", "Deployment", "apps/v1", True),
        ("ingresses.networking.k8s.io", "Ingress", "networking.k8s.io/v1", True),
        ("ingresses.networking", "Ingress", "networking.k8s.io/v1", True),
        ("jobs.batch", "Job", "batch/v1", True),
    ],
)
def test_known_resources_resolve(text: str, kind: str, api_version: str, namespaced: bool) -> None:
    mapping = MAPPER.mapping(text)
    assert mapping is not None
    assert (mapping.kind, mapping.api_version, mapping.namespaced) == (
        kind,
        api_version,
        namespaced,
    )


@pytest.mark.parametrize(
    "text", ["widgets", "deployments", "pods.apps", "deployments.app", "", "."]
)
def test_unknown_or_wrong_group_resources_do_not_resolve(text: str) -> None:
    assert MAPPER.mapping(text) is None


def test_ambiguous_group_prefix_resolves_to_nothing() -> None:
    def m(group: str) -> ResourceMapping:
        return ResourceMapping(
            GroupResource(group, "foos"), "v1", "Foo", namespaced=True, singular="foo"
        )

    mapper = RestMapper([m("a.example.com"), m("a.example.org")])
    assert mapper.mapping("foos.a") is None
    assert mapper.mapping("foos.a.example.com") is not None


def test_group_resource_string_round_trip() -> None:
    assert str(GroupResource.parse("foos.example.com")) == "foos.example.com"
    assert GroupResource.parse("jobs.batch") == GroupResource("batch", "jobs")
    assert str(GroupResource.parse("pods")) == "pods"


@pytest.mark.parametrize("seed", range(3))
def test_memoised_mappings_equal_a_fresh_mapper_s(seed: int) -> None:
    """The memo of `{resource}` strings (request-chosen, so bounded) answers what a mapper
    that never answered before answers, for known, aliased, unknown and ambiguous strings."""
    rng = random.Random(seed)
    words = [
        "pods",
        "Pods",
        "pod",
        "deployments.apps",
        "deployments",
        "deploy",
        "nodes",
        "x",
        "jobs.batch",
        "namespaces",
        "replicasets.apps",
        "services",
        "*",
        "",
    ]
    memoised = RestMapper(BUILTIN_MAPPINGS)
    for _ in range(200):
        text = rng.choice(words) + rng.choice(["", "", ".apps", ".x", "s"])
        assert memoised.mapping(text) == RestMapper(BUILTIN_MAPPINGS).mapping(text), text
