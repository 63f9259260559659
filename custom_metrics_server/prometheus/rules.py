"""prometheus-adapter's configuration, compiled: the rules, their servers and what they mean.

PURE. This module owns the values a configuration file becomes (:class:`AdapterConfig`,
:class:`Rule`, :class:`ResourceRules`, :class:`ServerConfig`, :class:`SeriesFilter`) and
their semantics, which follow prometheus-adapter (`pkg/config`, `pkg/naming`): series
filters, `name.matches` with `name.as`, Go's `$name` expansion (:func:`expand`), resource
association by `resources.overrides` and `resources.template` (both ways: the label of a
resource, the resource of a label). Reading the YAML is :mod:`.rules_config`; it must not
query anything.

Cost: `metric_name`, `label_for` and `label_resource` are O(len(name)).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from custom_metrics_server.domain import FailurePolicy, GroupResource
from custom_metrics_server.prometheus.gotemplate import Fields, Template
from custom_metrics_server.prometheus.gotemplate_values import TemplateError

__all__ = [
    "DEFAULT_SERVER",
    "NAMESPACES",
    "NODES",
    "AdapterConfig",
    "ConfigError",
    "ResourceRule",
    "ResourceRules",
    "Rule",
    "SeriesFilter",
    "ServerConfig",
    "expand",
    "label_pattern",
]

DEFAULT_SERVER: Final = "default"
NAMESPACES: Final = GroupResource("", "namespaces")
NODES: Final = GroupResource("", "nodes")
_GROUP_SANITIZER: Final = str.maketrans({".": "_", "-": "_"})
_MARK_GROUP: Final = "\x00group\x00"
_MARK_RESOURCE: Final = "\x00resource\x00"
_EXPAND: Final = re.compile(r"\$(?:\$|\{([A-Za-z0-9_]*)\}|([A-Za-z0-9_]+))")


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the rule and the field."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One Prometheus-compatible HTTP API."""

    name: str
    url: str
    ca_file: str | None = None
    token_file: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    insecure_skip_verify: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None


@dataclass(frozen=True, slots=True)
class SeriesFilter:
    """`seriesFilters[]`: `is` keeps names matching, `isNot` drops them."""

    regex: re.Pattern[str]
    positive: bool

    def keeps(self, name: str) -> bool:
        """Go's `regexp.MatchString` is a search, not an anchored match."""
        return (self.regex.search(name) is not None) == self.positive


def _label_for(
    overrides: Mapping[str, tuple[str, str]],
    template: Template | None,
    group_resource: GroupResource,
    singular: str,
) -> str | None:
    """An override naming the resource (plural or singular), else the template's label."""
    for label, (group, resource) in overrides.items():
        if group == group_resource.group and resource in (group_resource.resource, singular):
            return label
    if template is None:
        return None
    try:
        label = template.render(
            Fields(
                "schema.GroupResource",
                {"Group": group_resource.group.translate(_GROUP_SANITIZER), "Resource": singular},
            )
        )
    except TemplateError:
        return None
    return label or None


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled discovery rule (custom or external)."""

    where: str  # "rules[2]" / "externalRules[0]", for messages
    external: bool
    series_query: str
    filters: tuple[SeriesFilter, ...]
    name_regex: re.Pattern[str]
    name_as: str
    overrides: Mapping[str, tuple[str, str]]  # label -> (group, resource) as written
    resource_template: Template | None
    label_pattern: re.Pattern[str] | None  # reverse of resource_template
    metrics_query: Template
    namespaced: bool  # external rules only: add the request's namespace matcher
    server: str
    absent: Literal["error", "zero", "last-good"]
    window: int | None
    replacements: tuple[tuple[str, str], ...]
    failure: Literal["error", "zero", "last-good"] = "error"
    max_age: float | None = None

    def failure_policy(self) -> FailurePolicy | None:
        """The rule's failure policy, None when it keeps today's behaviour."""
        if self.absent == "error" and self.failure == "error" and self.max_age is None:
            return None
        return FailurePolicy(
            absent=self.absent,
            failure=self.failure,
            max_age=self.max_age,
            source=f"Prometheus {self.where}",
        )

    def keeps(self, series_name: str) -> bool:
        """Whether a series name passes every filter (name.matches included)."""
        return all(f.keeps(series_name) for f in self.filters)

    def metric_name(self, series_name: str) -> str | None:
        """The API name of a series (`name.matches` + `name.as`), or None when it does not
        match."""
        match = self.name_regex.search(series_name)
        if match is None:
            return None
        return expand(self.name_as, match)

    def label_for(self, group_resource: GroupResource, singular: str) -> str | None:
        """The Prometheus label naming objects of `group_resource` (upstream
        `LabelForResource`): an override, else the template, else None."""
        return _label_for(self.overrides, self.resource_template, group_resource, singular)

    def label_resource(self, label: str) -> tuple[str, str] | None:
        """(group, resource) a label names, unresolved (`pod`, `deployment`), or None."""
        override = self.overrides.get(label)
        if override is not None:
            return override
        if self.label_pattern is None:
            return None
        match = self.label_pattern.fullmatch(label)
        if match is None:
            return None
        groups = match.groupdict()
        return groups.get("group") or "", groups["resource"]


@dataclass(frozen=True, slots=True)
class ResourceRule:
    """`resourceRules.cpu` or `.memory`: the queries for containers and nodes."""

    container_query: Template
    node_query: Template
    container_label: str
    overrides: Mapping[str, tuple[str, str]]
    resource_template: Template | None

    def label_for(self, resource: str) -> str | None:
        """The label of a core resource (`namespace`, `pod`, `node`, singular)."""
        return _label_for(
            self.overrides, self.resource_template, GroupResource("", resource + "s"), resource
        )


@dataclass(frozen=True, slots=True)
class ResourceRules:
    """`resourceRules`: what `metrics.k8s.io` is served from when its source is Prometheus."""

    cpu: ResourceRule
    memory: ResourceRule
    window: int  # seconds
    server: str = DEFAULT_SERVER


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    """A whole configuration file."""

    rules: tuple[Rule, ...] = ()
    external_rules: tuple[Rule, ...] = ()
    resource_rules: ResourceRules | None = None
    servers: Mapping[str, ServerConfig] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def all_rules(self) -> tuple[Rule, ...]:
        """Custom rules then external rules."""
        return self.rules + self.external_rules


def expand(template: str, match: re.Match[str]) -> str:
    """Go `Regexp.Expand`: `$1`, `${1}`, `$name`, `${name}`, `$$`; `$1x` means `${1x}`, and a
    group that does not exist expands to nothing."""

    def one(found: re.Match[str]) -> str:
        if found.group(0) == "$$":
            return "$"
        name = found.group(1) if found.group(1) is not None else found.group(2)
        try:
            value = match.group(int(name)) if name.isdigit() else match.group(name)
        except IndexError:  # no such group: Go expands it to nothing
            return ""
        return value or ""

    return _EXPAND.sub(one, template)


def label_pattern(template: Template) -> re.Pattern[str] | None:
    """A regex recognising the labels a resource template produces (upstream
    `labelGroupResExtractor`): the template rendered with markers, literals escaped."""
    try:
        rendered = template.render(
            Fields("schema.GroupResource", {"Group": _MARK_GROUP, "Resource": _MARK_RESOURCE})
        )
    except TemplateError:
        return None
    if _MARK_RESOURCE not in rendered:
        return None
    pattern = re.escape(rendered)
    pattern = pattern.replace(re.escape(_MARK_GROUP), "(?P<group>.+?)", 1)
    pattern = pattern.replace(re.escape(_MARK_RESOURCE), "(?P<resource>.+?)", 1)
    return re.compile(pattern)
