"""What the pod-metrics backend is told, as plain values (the pydantic model in `settings` reads
the backends file into these): which pods to scrape and how, which series to keep, and how
values become answers.

* `MetricRule`: a metric name (exact, or a glob with `*` and `?`) and an optional label
  selector its series must match to be kept;
* `MetricSelection`: the rules of one scrape config as the exposition reader asks them
  (`choices` memoises every name seen, so a name costs one dictionary lookup per line);
* `ScrapeConfig`: pods by namespace and label selector, and the endpoint to scrape
  (port number or container port name, path, scheme);
* `AnnotationDiscovery`: pods that opt in with annotations (`<prefix>/scrape: "true"`, and
  `<prefix>/port`, `/path`, `/scheme`);
* `PodMetricsConfig`: all of it plus the schedule, limits and aggregation.

PURE: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from custom_metrics_server.backends.pod_metrics.exposition import LabelFilter, Labels, patterns
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.labels import EVERYTHING, Selector

__all__ = [
    "WORKLOAD_KINDS",
    "AnnotationDiscovery",
    "MetricRule",
    "MetricSelection",
    "PodMetricsConfig",
    "ScrapeConfig",
]

#: The workload kinds whose pods an Object metric aggregates, by the resource name in settings.
WORKLOAD_KINDS: Final = {
    "deployments": ("Deployment", GroupResource("apps", "deployments")),
    "statefulsets": ("StatefulSet", GroupResource("apps", "statefulsets")),
    "replicasets": ("ReplicaSet", GroupResource("apps", "replicasets")),
    "daemonsets": ("DaemonSet", GroupResource("apps", "daemonsets")),
    "jobs": ("Job", GroupResource("batch", "jobs")),
}
#: Names memoised per selection; past it, names not yet seen are decided on every line (a
#: pod inventing metric names cannot grow memory).
_MEMO_LIMIT: Final = 10_000


@dataclass(frozen=True, slots=True)
class MetricRule:
    """Keep the series of metric `name` (a glob when it holds `*` or `?`) whose labels match
    `labels`."""

    name: str
    labels: Selector = EVERYTHING

    @property
    def is_glob(self) -> bool:
        """Whether `name` is a pattern."""
        return "*" in self.name or "?" in self.name


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    )


class MetricSelection:
    """The rules of one scrape config, as `exposition.read_exposition` asks them: `pattern`
    finds the lines of selected metrics, `choice(name)` says which of their series to keep
    (the first rule naming a metric decides, exact names before globs)."""

    __slots__ = ("_choices", "_globs", "blocks", "kinds", "pattern", "rules", "type_pattern")

    def __init__(self, rules: Sequence[MetricRule]) -> None:
        self.rules = tuple(rules)
        self._choices: dict[str, LabelFilter | bool] = {}
        for rule in self.rules:
            if not rule.is_glob and rule.name not in self._choices:
                self._choices[rule.name] = self._choice(rule)
        self._globs = [(_glob(rule.name), rule) for rule in self.rules if rule.is_glob]
        self.pattern, self.type_pattern = patterns(
            [rule.name for rule in self.rules if not rule.is_glob],
            [rule.name for rule in self.rules if rule.is_glob],
        )
        self.blocks: dict[tuple[str, str], Labels | None] = {}
        self.kinds: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], dict[str, str]]] = {}

    @staticmethod
    def _choice(rule: MetricRule) -> LabelFilter | bool:
        return True if rule.labels.is_everything() else rule.labels.matches

    def choice(self, name: str) -> LabelFilter | bool:
        """See `exposition.Selection.choice`; memoised up to a bound."""
        found = self._choices.get(name)
        if found is not None:
            return found
        choice: LabelFilter | bool = False
        for pattern, rule in self._globs:
            if pattern.fullmatch(name):
                choice = self._choice(rule)
                break
        if len(self._choices) < _MEMO_LIMIT:
            self._choices[name] = choice
        return choice


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    """Pods matching `namespaces` (empty: all) and `selector`, scraped at `port`/`path`."""

    name: str
    port: int | str  # a number, or the name of a container port
    path: str = "/metrics"
    scheme: Literal["http", "https"] = "http"
    namespaces: frozenset[str] = frozenset()
    selector: Selector = EVERYTHING
    metrics: tuple[MetricRule, ...] = ()


@dataclass(frozen=True, slots=True)
class AnnotationDiscovery:
    """Pods that opt in with `<prefix>/scrape: "true"` (and `/port`, `/path`, `/scheme`)."""

    prefix: str = "custom-metrics-server.io"
    namespaces: frozenset[str] = frozenset()
    metrics: tuple[MetricRule, ...] = ()


@dataclass(frozen=True, slots=True)
class PodMetricsConfig:
    """Everything the backend does (see docs/backends.md, "Pods' own metrics")."""

    metrics: tuple[MetricRule, ...]
    scrape: tuple[ScrapeConfig, ...] = ()
    annotations: AnnotationDiscovery | None = None
    source: Literal["direct", "proxy"] = "direct"
    interval: float = 15.0
    timeout: float = 10.0
    concurrency: int = 32
    max_body_bytes: int = 10 << 20
    max_series_per_target: int = 1_000
    stale_after: float = 45.0
    workloads: tuple[str, ...] = tuple(WORKLOAD_KINDS)
    workload_value: Literal["sum", "average"] = "sum"
    tls_ca_file: str | None = None
    tls_insecure_skip_verify: bool = False
    watch_page_size: int = 500

    def selection(self, rules: Sequence[MetricRule]) -> MetricSelection:
        """The selection of a scrape config's rules, or of the backend's when it has none."""
        return MetricSelection(rules or self.metrics)
