"""Failure policies as configured: the backends file's routes and the Prometheus rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import FailurePolicy
from custom_metrics_server.plugins.config import BackendsConfigError, parse_backends_file
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.prometheus import rules_config
from custom_metrics_server.prometheus.rules import (
    DEFAULT_SERVER,
    AdapterConfig,
    ConfigError,
    ServerConfig,
)

DEFAULT = ServerConfig(name=DEFAULT_SERVER, url="http://prometheus:9090")


def parse_config(text: str) -> AdapterConfig:
    return rules_config.parse_config(text, default_server=DEFAULT)


FILE = """
backends:
  - name: objects
    type: fixture
    settings: {objects: []}
  - name: switch
    type: tests.fakes.plugins:switchable
    settings: {state: /nonexistent}
    routes:
      - metric: switch_pod
        absent: zero
        failure: last-good
        maxAge: 5m
      - api: external
        metric: switch_total
"""


def test_a_route_carries_its_failure_policy(tmp_path: Path) -> None:
    config = parse_backends_file(FILE, source="backends.yaml")
    loaded = load_backends(config, base_dir=tmp_path, default_timeout=10)
    host = next(host for host in loaded.hosts if host.name == "switch")
    assert host.routes is not None
    assert host.routes[0].policy == FailurePolicy(
        absent="zero",
        failure="last-good",
        max_age=300.0,
        source="backends[1] 'switch' (type tests.fakes.plugins:switchable): routes[0]",
    )
    assert host.routes[1].policy is None
    assert InMemoryCluster  # the fixture entry provided the view


@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("{metric: x, failure: last-good}", "last-good needs maxAge"),
        ("{metric: x, absent: maybe}", "absent"),
        ("{metric: x, maxAge: 0s}", "maxAge"),
    ],
)
def test_a_bad_policy_is_an_error_naming_the_route(route: str, message: str) -> None:
    text = f"backends:\n  - name: a\n    type: fixture\n    routes: [{route}]\n"
    with pytest.raises(BackendsConfigError) as raised:
        parse_backends_file(text, source="f.yaml")
    assert "routes[0]" in str(raised.value)
    assert message in str(raised.value)


RULE = """
rules:
  - seriesQuery: 'http_requests_total'
    resources: {template: <<.Resource>>}
    metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    %s
"""


def test_prometheus_rules_carry_a_failure_policy() -> None:
    config = parse_config(RULE % "absent: last-good\n    failure: zero\n    maxAge: 2m")
    rule = config.rules[0]
    assert rule.failure_policy() == FailurePolicy(
        absent="last-good", failure="zero", max_age=120.0, source=f"Prometheus {rule.where}"
    )
    assert parse_config(RULE % "window: 1m").rules[0].failure_policy() is None


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("failure: last-good", "maxAge: is required with last-good"),
        ("failure: never", "failure: must be `error`, `zero` or `last-good`"),
        ("maxAge: soon", "maxAge"),
    ],
)
def test_bad_prometheus_policies_name_the_rule(keys: str, message: str) -> None:
    with pytest.raises(ConfigError, match="rules\\[0\\]") as raised:
        parse_config(RULE % keys)
    assert message in str(raised.value)
