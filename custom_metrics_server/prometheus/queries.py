"""The PromQL of one request: a rule's `metricsQuery` rendered with the request's matchers.

PURE. Follows prometheus-adapter's `metricsQuery.Build` / `BuildExternal` argument by argument
(`.Series`, `.LabelMatchers`, `.LabelValuesByName`, `.GroupBy`, `.GroupBySlice`, matchers in
the order metric selector, namespace, object), with one deliberate change: several objects are
not put into a `pod=~"a|b|c..."` regex. The query names the namespace (or nothing, for
cluster-scoped resources) and groups by the object label; the caller keeps the requested
names. A query's length is then independent of how many objects the label selector matched.

Cost: O(len(selector) + len(template output)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from custom_metrics_server.errors import InternalError
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.prometheus.gotemplate import Fields, Template
from custom_metrics_server.prometheus.gotemplate_values import TemplateError
from custom_metrics_server.prometheus.promql import eq, selector_matchers
from custom_metrics_server.prometheus.rules import NAMESPACES, Rule


@dataclass(frozen=True, slots=True)
class CustomQuery:
    """A rendered query and the labels that name objects in its result."""

    promql: str
    object_label: str
    namespace_label: str | None  # None for cluster-scoped requests


def render(
    template: Template,
    *,
    where: str,
    series: str,
    matchers: Sequence[str],
    by_name: Mapping[str, str],
    group_by: Sequence[str],
    metric: str,
) -> str:
    """Execute a query template with prometheus-adapter's arguments (`where` names the rule in
    errors); a template failure is a configuration error (500)."""
    try:
        query = template.render(
            Fields(
                "naming.queryTemplateArgs",
                {
                    "Series": series,
                    "LabelMatchers": ",".join(matchers),
                    "LabelValuesByName": dict(by_name),
                    "GroupBy": ",".join(group_by),
                    "GroupBySlice": list(group_by),
                },
            )
        )
    except TemplateError as err:
        raise InternalError(f"{where}: query for {metric!r}: {err}") from err
    if not query.strip():
        raise InternalError(f"{where}: query for {metric!r} rendered empty")
    return query


def custom_query(
    rule: Rule,
    *,
    series: str,
    metric: str,
    object_label: str,
    namespace: str,
    names: Sequence[str],
    metric_selector: Selector,
) -> CustomQuery | None:
    """The query for `names` (of one namespace, or cluster-scoped when `namespace` is "").

    None when the rule has no label for namespaces although the request is namespaced.
    Raises `BadRequest` for a metric selector PromQL cannot express.
    """
    parts = selector_matchers(metric_selector, what="metricLabelSelector")
    matchers = [expression for _, expression, _ in parts]
    by_name = {key: joined for key, _, joined in parts}
    namespace_label = None
    if namespace:
        namespace_label = rule.label_for(NAMESPACES, "namespace")
        if namespace_label is None:
            return None
        matchers.append(eq(namespace_label, namespace))
        by_name[namespace_label] = namespace
    if len(names) == 1:
        matchers.append(eq(object_label, names[0]))
        by_name[object_label] = names[0]
    promql = render(
        rule.metrics_query,
        where=rule.where,
        series=series,
        matchers=matchers,
        by_name=by_name,
        group_by=[object_label],
        metric=metric,
    )
    return CustomQuery(promql, object_label, namespace_label)


def external_query(
    rule: Rule, *, series: str, metric: str, namespace: str, metric_selector: Selector
) -> str:
    """The query of an external metric: selector matchers, then the namespace unless the rule
    says `namespaced: false`; label value replacements apply to `.LabelValuesByName`."""
    parts = selector_matchers(metric_selector, what="labelSelector")
    matchers = [expression for _, expression, _ in parts]
    by_name = {key: joined for key, _, joined in parts}
    if rule.namespaced:
        namespace_label = rule.label_for(NAMESPACES, "namespace") or "namespace"
        matchers.append(eq(namespace_label, namespace))
        by_name[namespace_label] = namespace
    for find, replace in rule.replacements:
        by_name = {key: value.replace(find, replace) for key, value in by_name.items()}
    return render(
        rule.metrics_query,
        where=rule.where,
        series=series,
        matchers=matchers,
        by_name=by_name,
        group_by=[],
        metric=metric,
    )
