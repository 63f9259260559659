"""The platform's policy over `MetricDefinition`s, from the server's configuration (the
`metric-definitions` entry of the backends file; docs/metric-definitions.md, "For the platform
team"): which source types are allowed, and the limits per namespace (definitions, scrape
targets, series per query, the shortest interval), with per-namespace overrides.

A definition over a limit is refused whole, with the reason `OverLimit` (`SourceNotAllowed`
for a type the platform did not allow), never half-served: `admit` checks one definition's own
spec; `namespace_limits` is what the catalog checks over all the definitions of a namespace,
oldest first (the older definitions keep their place; the newer one over the limit is refused).
`formula_inputs` are the platform's own External metrics a `formula` may read (none unless the
platform lists them: such a metric may hold more than the namespace's own data).

PURE: no I/O. Cost: O(1) per check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from custom_metrics_server.backends.definitions.spec import Definition

__all__ = ["SOURCE_TYPES", "Limits", "Platform"]

#: Every source type of the CRD. Which of them this server serves is what has a maker
#: (`admit`'s `served`); the platform allows all of them unless it says otherwise.
SOURCE_TYPES: Final = frozenset({"Pods", "Prometheus", "Formula", "Schedule", "HTTP"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Limits of one namespace."""

    #: definitions served in the namespace (the oldest ones)
    definitions: int = 50
    #: pod endpoints scraped for the namespace's `pods` sources, together
    scrape_targets: int = 100
    #: the shortest `interval` a definition may ask for, in seconds
    min_interval: float = 15.0
    #: series one `prometheus` query may answer (an answer over it is refused whole)
    series_per_query: int = 1000


@dataclass(frozen=True, slots=True)
class Platform:
    """Allowed source types and limits (see the module)."""

    allowed: frozenset[str] = SOURCE_TYPES
    limits: Limits = Limits()
    #: namespace -> its own limits (instead of `limits`)
    namespaces: Mapping[str, Limits] = field(default_factory=dict)
    #: the platform's External metrics a formula may read, each matched against the whole
    #: name (`formulaPlatformInputs`); none by default
    formula_inputs: tuple[re.Pattern[str], ...] = ()

    def allows_formula_input(self, metric: str) -> bool:
        """Whether a formula may read the platform's External metric `metric`.
        O(patterns)."""
        return any(pattern.fullmatch(metric) for pattern in self.formula_inputs)

    def namespace_limits(self, namespace: str) -> Limits:
        """The limits of `namespace`. O(1)."""
        return self.namespaces.get(namespace, self.limits)

    def admit(self, definition: Definition, served: frozenset[str]) -> tuple[str, str] | None:
        """(reason, message) when the definition's own spec is refused by the policy, given
        the source types this server can serve (`served`: those with a maker); else None."""
        kind = definition.source_type
        if kind not in self.allowed:
            allowed = ", ".join(sorted(self.allowed)) or "none"
            return (
                "SourceNotAllowed",
                f"source type {kind} is not allowed by the platform (allowed: {allowed})",
            )
        if kind not in served:
            return ("SourceNotAllowed", f"source type {kind} is not served by this server yet")
        shortest = self.namespace_limits(definition.namespace).min_interval
        if definition.interval < shortest:
            return (
                "OverLimit",
                f"spec.interval {definition.interval:g}s is shorter than the platform's "
                f"shortest interval for namespace {definition.namespace} ({shortest:g}s)",
            )
        return None
