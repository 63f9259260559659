"""Which metrics the Prometheus rules yield: series listings in, a metric registry out.

A listing is reduced at once to the distinct (series name, label-name set) pairs it contains,
so memory is bounded by metric *shapes*, not by series: 50,000 pod series of one metric are
one pair. The registry maps each `MetricInfo` (and each external metric name) to the rule and
series name that answer it, as prometheus-adapter's `SeriesRegistry` does.

Resource association follows prometheus-adapter: each label that a rule's overrides or
template map to a group-resource known to the cluster makes the metric available for that
resource; a series is namespaced when one of its labels maps to `namespaces`. A namespaced
resource whose series carry no namespace label cannot be asked for, and is left out.

Cost: `series_shape` is O(labels) per series of a listing; `build` is O(pairs x labels).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from custom_metrics_server.domain import GroupResource, MetricInfo, ResourceMapping
from custom_metrics_server.prometheus.rules import NAMESPACES, NODES, AdapterConfig, Rule

logger = logging.getLogger(__name__)

SeriesShape = tuple[str, frozenset[str]]
Resolver = Callable[[str], Awaitable[ResourceMapping | None]]


@dataclass(frozen=True, slots=True)
class Entry:
    """What answers one metric: the rule and the Prometheus series name (`.Series`)."""

    rule: Rule
    series: str


@dataclass(frozen=True, slots=True)
class Registry:
    """Every metric the rules yield from the last listings; immutable, swapped whole."""

    custom: Mapping[MetricInfo, Entry] = field(default_factory=dict)
    external: Mapping[str, Entry] = field(default_factory=dict)


def series_shape(labels: Mapping[str, str]) -> SeriesShape | None:
    """(name, label names) of one series' label set; None without a name."""
    name = labels.get("__name__")
    if not name or not isinstance(name, str):
        return None
    return name, frozenset(key for key in labels if key != "__name__")


def _candidates(group: str, resource: str) -> list[str]:
    """REST-mapper spellings to try for a (group, resource) read from a label."""
    if not group:
        return [resource]
    out = [f"{resource}.{group}"]
    dotted = group.replace("_", ".")
    if dotted != group:
        out.append(f"{resource}.{dotted}")
    return out


async def build(
    config: AdapterConfig,
    listings: Mapping[tuple[str, str], Sequence[SeriesShape]],
    resolve: Resolver,
) -> Registry:
    """The registry for the current listings, keyed by (server, seriesQuery)."""
    resolved: dict[tuple[str, str], ResourceMapping | None] = {}

    async def mapping_for(group: str, resource: str) -> ResourceMapping | None:
        key = (group, resource)
        if key not in resolved:
            found = None
            for text in _candidates(group, resource):
                found = await resolve(text)
                if found is not None:
                    break
            resolved[key] = found
        return resolved[key]

    custom: dict[MetricInfo, Entry] = {}
    for rule in config.rules:
        for series_name, labels in listings.get((rule.server, rule.series_query), ()):
            if not rule.keeps(series_name):
                continue
            metric = rule.metric_name(series_name)
            if not metric:
                continue
            resources: list[ResourceMapping] = []
            namespaced = False
            for label in labels:
                target = rule.label_resource(label)
                if target is None:
                    continue
                mapping = await mapping_for(*target)
                if mapping is None:
                    continue
                resources.append(mapping)
                namespaced = namespaced or mapping.group_resource == NAMESPACES
            for mapping in resources:
                group_resource: GroupResource = mapping.group_resource
                if mapping.namespaced and not namespaced:
                    continue
                scoped = mapping.namespaced and group_resource not in (NAMESPACES, NODES)
                custom[MetricInfo(group_resource, scoped, metric)] = Entry(rule, series_name)
    external: dict[str, Entry] = {}
    for rule in config.external_rules:
        for series_name, _labels in listings.get((rule.server, rule.series_query), ()):
            if rule.keeps(series_name) and (metric := rule.metric_name(series_name)):
                external[metric] = Entry(rule, series_name)
    return Registry(custom=custom, external=external)
