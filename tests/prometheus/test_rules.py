"""Loading prometheus-adapter configuration files: semantics, validation and messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from custom_metrics_server.domain import GroupResource
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ConfigError, ServerConfig, expand
from custom_metrics_server.prometheus.rules_config import parse_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "prometheus"
DEFAULT = ServerConfig(name=DEFAULT_SERVER, url="http://prometheus:9090")


def load(text: str):  # type: ignore[no-untyped-def]
    return parse_config(text, default_server=DEFAULT)


@pytest.mark.parametrize(
    "name", ["adapter-default-rules.yaml", "adapter-resource-rules.yaml", "rules.yaml"]
)
def test_upstream_and_test_configurations_load(name: str) -> None:
    config = load((FIXTURES / name).read_text())
    assert not [w for w in config.warnings if "unknown" in w]
    if name == "adapter-default-rules.yaml":
        assert len(config.rules) == 6
        assert len(config.external_rules) == 2
        assert config.resource_rules is not None
    if name == "adapter-resource-rules.yaml":
        assert config.rules == ()
        assert config.resource_rules is not None


def test_default_names_follow_upstream() -> None:
    config = load(
        """
rules:
- seriesQuery: 'a'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^container_(.*)_seconds_total$"}
- seriesQuery: 'b'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^container_.*$"}
- seriesQuery: 'c'
  resources: {template: "<<.Resource>>"}
- seriesQuery: 'd'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^(.*)_total$", as: "${1}_per_second"}
- seriesQuery: 'e'
  resources: {template: "<<.Resource>>"}
  name: {matches: "^(.*)_total$", as: "$1_per_second"}
"""
    )
    a, b, c, d, e = config.rules
    assert a.metric_name("container_cpu_usage_seconds_total") == "cpu_usage"
    assert b.metric_name("container_memory") == "container_memory"
    assert c.metric_name("anything") == "anything"
    assert d.metric_name("http_requests_total") == "http_requests_per_second"
    # Go's Expand reads `$1_per_second` as the group named `1_per_second`: empty.
    assert e.metric_name("http_requests_total") == ""
    # name.matches is also a filter
    assert not a.keeps("container_memory_bytes")
    assert a.keeps("container_cpu_usage_seconds_total")


def test_expand_is_gos() -> None:
    match = re.search(r"(?P<word>[a-z]+)_(\d+)", "abc_12")
    assert match is not None
    assert expand("$1-$2-${word}-$word-$$-${9}-$missing", match) == "abc-12-abc-abc-$--"


def test_series_filters() -> None:
    config = load(
        """
rules:
- seriesQuery: '{__name__=~"^container_.*"}'
  seriesFilters: [{isNot: "^container_.*_seconds_total$"}, {is: "_total$"}]
  resources: {overrides: {pod: {resource: pod}}}
"""
    )
    (rule,) = config.rules
    assert rule.keeps("container_network_bytes_total")
    assert not rule.keeps("container_cpu_seconds_total")
    assert not rule.keeps("container_memory_bytes")


def test_resource_template_both_ways() -> None:
    config = load(
        """
rules:
- seriesQuery: 'x'
  resources:
    template: "kube_<<.Group>>_<<.Resource>>"
    overrides: {exported_pod: {resource: pod}}
"""
    )
    (rule,) = config.rules
    assert rule.label_resource("kube_apps_deployment") == ("apps", "deployment")
    assert rule.label_resource("exported_pod") == ("", "pod")
    assert rule.label_resource("instance") is None
    assert rule.label_for(GroupResource("apps", "deployments"), "deployment") == (
        "kube_apps_deployment"
    )
    assert rule.label_for(GroupResource("networking.k8s.io", "ingresses"), "ingress") == (
        "kube_networking_k8s_io_ingress"
    )
    assert rule.label_for(GroupResource("", "pods"), "pod") == "exported_pod"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("rules: [{resources: {template: x}}]", r"rules\[0\]: seriesQuery: is required"),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, seriesFilters: [{is: a, isNot: b}]}]",
            r"rules\[0\] \(seriesQuery 'a'\): seriesFilters\[0\]: cannot have both",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, seriesFilters: [{}]}]",
            r"seriesFilters\[0\]: must have either",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, name: {matches: '(a'}}]",
            r"name.matches: invalid regular expression '\(a'",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, name: {matches: '(a)(b)'}}]",
            r"name.as: must be set: '\(a\)\(b\)' has 2 capture groups",
        ),
        ("rules: [{seriesQuery: a}]", r"resources: needs `overrides` or a `template`"),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, metricsQuery: '<<.Series'}]",
            r"rules\[0\] \(seriesQuery 'a'\): metricsQuery: template: metrics-query: unclosed action",
        ),
        (
            "rules: [{seriesQuery: a, resources: {overrides: {'bad-label': {resource: pod}}}}]",
            r"resources.overrides.bad-label: is not a valid Prometheus label name",
        ),
        (
            "rules: [{seriesQuery: a, resources: {overrides: {pod: {group: x}}}}]",
            r"resources.overrides.pod.resource: is required",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, server: thanos}]",
            r"server: names no configured Prometheus server \(known: default\)",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, absent: maybe}]",
            r"absent: must be `error`, `zero` or `last-good`",
        ),
        (
            "rules: [{seriesQuery: a, resources: {template: x}, window: soon}]",
            r"window: not a Prometheus duration",
        ),
        (
            "externalRules: [{seriesQuery: a, resources: {namespaced: 'no'}}]",
            r"externalRules\[0\] \(seriesQuery 'a'\): resources.namespaced: must be true or false",
        ),
        ("rules: {seriesQuery: a}", r"rules: must be a list of rules"),
        ("- a\n- b", r"must be a mapping"),
        ("rules: [", r"is not valid YAML"),
        ("servers: [{name: x, url: ftp://x}]", r"servers\[0\]: url: must be an http"),
        ("resourceRules: {cpu: {nodeQuery: x}}", r"resourceRules: cpu.containerQuery: is required"),
    ],
)
def test_errors_name_the_rule_and_the_field(document: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(document)


def test_unknown_fields_are_warnings_not_errors() -> None:
    # The upstream sample config carries the typo `metricQuery`: Go ignores it, so do we,
    # and say so.
    config = load(
        """
rules:
- seriesQuery: 'cheddar{sharp="true"}'
  name: {as: "cheesy_goodness"}
  resources:
    overrides:
      brand: {group: "cheese.io", resource: "brand"}
  metricQuery: 'count(cheddar{sharp="true"})'
something: else
"""
    )
    assert any("metricQuery: unknown field, ignored" in w for w in config.warnings)
    assert any("something: unknown top-level field" in w for w in config.warnings)
    assert any("metricsQuery: missing" in w for w in config.warnings)
    (rule,) = config.rules
    assert rule.metric_name("cheddar") == "cheesy_goodness"


def test_several_servers_each_rule_choosing_one() -> None:
    config = load(
        """
servers:
- name: thanos
  url: https://thanos-query:9090
  headers: {X-Scope-OrgID: team-a}
  tokenFile: /var/run/secrets/token
rules:
- {seriesQuery: a, resources: {template: "<<.Resource>>"}}
- {seriesQuery: b, resources: {template: "<<.Resource>>"}, server: thanos}
"""
    )
    assert set(config.servers) == {"default", "thanos"}
    assert config.servers["thanos"].headers == (("X-Scope-OrgID", "team-a"),)
    assert [rule.server for rule in config.rules] == ["default", "thanos"]
    with pytest.raises(ConfigError, match=r"servers\[1\]: name: 'x' is defined twice"):
        load("servers: [{name: x, url: 'http://a'}, {name: x, url: 'http://b'}]")
