"""What the server knows of one `MetricDefinition` (`State`): whether it is valid and serves,
why not (its reason and message, what shadows it), its source and the source's last value and
error, and the object's status as last seen. The catalog decides it, the tick records values
into it, the status writer writes it (`status.desired`), and explanations show it (`describe`).

PURE: no I/O. Cost: O(1) per method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from custom_metrics_server.backends.definitions.source import Source, Value
from custom_metrics_server.backends.definitions.spec import Definition
from custom_metrics_server.sdk.precedence import Winner

__all__ = ["State"]


@dataclass(slots=True)
class State:
    """What the server knows of one definition (later written to its status)."""

    definition: Definition
    valid: bool = False
    reason: str = "Pending"
    message: str = ""
    shadowed_by: str | None = None
    #: the platform backend the router gives the metric to instead (`ShadowedByPlatform` when
    #: valid; kept when over a limit, so `follow_platform` compares it)
    platform: Winner | None = None
    #: (reason, message) of a refusal by its spec, the policy or its source's maker
    own_refusal: tuple[str, str] | None = None
    source: Source | None = None
    entered: bool = False
    last_value: float | None = None
    last_value_time: float | None = None
    value_count: int = 0
    last_error: str | None = None
    last_error_time: float | None = None
    last_good: list[Value] = field(default_factory=list)
    next_refresh: float = 0.0
    #: the sequence number of its live entry in the tick's schedule (older ones are stale)
    wake: int = -1
    #: whether the source had a value at the last tick (the status's Ready)
    has_value: bool = False
    #: the object's resourceVersion and status as last seen (watch, or a status write's answer)
    resource_version: str = ""
    observed_status: Mapping[str, Any] = field(default_factory=dict)

    @property
    def serving(self) -> bool:
        """Valid, not shadowed, not over a limit: its source answers for the metric."""
        return (
            self.valid
            and self.shadowed_by is None
            and self.platform is None
            and self.source is not None
        )

    def shadow(self) -> str | None:
        """What answers for the name instead (`route.shadowedBy`): `backend <name>` or
        `MetricDefinition <namespace>/<name>`; None when nothing does."""
        if self.platform is not None and self.valid:
            return f"backend {self.platform.backend}"
        if self.shadowed_by is not None:
            return f"MetricDefinition {self.shadowed_by}"
        return None

    def shown_value(self) -> float | None:
        """The last value as the status shows it: External the sum of its series, Pods the
        average over its pods, Object as `podValues` says (sum or average)."""
        value = self.last_value
        if value is None or self.value_count == 0:
            return value
        served = self.definition.served_as
        if served.type == "Pods" or (served.type == "Object" and served.pod_values == "average"):
            return value / self.value_count
        return value

    def describe(self) -> dict[str, Any]:
        """The state as the metric status page and explanations show it."""
        definition = self.definition
        return {
            "namespace": definition.namespace,
            "name": definition.name,
            "metric": definition.metric,
            "servedAs": definition.served_as.type,
            "source": definition.source_type,
            "valid": self.valid,
            "ready": self.serving and self.last_value is not None,
            "reason": self.reason,
            "message": self.message,
            "shadowedBy": self.shadow(),
            "lastValue": self.shown_value(),
            "lastValueTime": self.last_value_time,
            "valueCount": self.value_count,
            "lastError": self.last_error,
            "lastErrorTime": self.last_error_time,
        }
