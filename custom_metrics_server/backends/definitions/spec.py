"""A watched `MetricDefinition` (docs/metric-definitions.md) as typed values, and the checks of
its spec that the CRD's CEL rules cannot make.

`parse_definition(obj)` reads one object as the list+watch hands it (a dict) into a
`Definition`: its identity (namespace, name, uid, creationTimestamp, generation) and its spec.
The API server has already enforced the schema and the CEL rules, so a field of the wrong
shape here means an object written around them (an older CRD, a client bypassing validation):
it is refused too, never half-read. What only the server can check is checked here and
refused into `Definition.refusal`, a (reason, message) pair in the words of the status's
`Valid` condition: the time zone exists (`UnknownTimeZone`), the label selector parses, the
port is one. Source types served by other modules (`Prometheus`, `Formula`, `HTTP`) keep
their member as the raw mapping in `Definition.source_spec`, for those modules to read.

PURE: no I/O (zoneinfo reads the system's time zone database, cached by the standard library).
Cost: O(size of the spec) per object event.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.durations import go_duration_seconds
from custom_metrics_server.machinery.labels import (
    EVERYTHING,
    Operator,
    Selector,
    new_requirement,
)
from custom_metrics_server.machinery.validation import SelectorError

__all__ = [
    "DAYS",
    "Definition",
    "PodsSpec",
    "Refused",
    "ScheduleSpec",
    "ServedAs",
    "Window",
    "local_minutes",
    "parse_definition",
    "selector_of",
]

ServedType = Literal["External", "Pods", "Object"]
Policy = Literal["error", "zero", "last-good"]

DAYS: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_WORKLOADS: Final = {
    "Deployment": GroupResource("apps", "deployments"),
    "StatefulSet": GroupResource("apps", "statefulsets"),
    "ReplicaSet": GroupResource("apps", "replicasets"),
    "DaemonSet": GroupResource("apps", "daemonsets"),
    "Job": GroupResource("batch", "jobs"),
}
_OPERATORS: Final = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}
_CLOCK: Final = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])|24:00")
_SOURCES: Final = ("Pods", "Prometheus", "Formula", "Schedule", "HTTP")


class Refused(Exception):
    """A spec the server will not serve: `reason` (a `Valid` condition reason) and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class ServedAs:
    """How the metric is served: `External`, `Pods`, or `Object` on `workload`."""

    type: ServedType
    #: Object only: (resource, name) of the workload in the definition's namespace
    workload: tuple[GroupResource, str] | None = None
    pod_values: Literal["sum", "average"] = "sum"


@dataclass(frozen=True, slots=True)
class PodsSpec:
    """The `pods` source: pods of the namespace matching `selector`, scraped at port/path."""

    selector: Selector
    port: int | str
    path: str
    metric: str
    counter: bool


@dataclass(frozen=True, slots=True)
class Window:
    """`days` (0 = Monday; empty: every day), minutes from midnight [start, end), value."""

    days: frozenset[int]
    start: int
    end: int
    value: float


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """The `schedule` source: the first window holding the local time gives the value."""

    zone: zoneinfo.ZoneInfo
    windows: tuple[Window, ...]
    default: float | None


@dataclass(frozen=True, slots=True)
class Definition:
    """One `MetricDefinition` as the server reads it (see the module)."""

    namespace: str
    name: str
    uid: str
    created: str  # RFC 3339, as written by the API server: orders lexically
    generation: int
    metric: str
    served_as: ServedAs
    #: `Pods`, `Prometheus`, `Formula`, `Schedule` or `HTTP` (what `source.type` says)
    source_type: str
    #: the source's member (`source.pods`, `source.schedule`, ...), as written
    source_spec: Mapping[str, Any]
    interval: float
    absent: Policy = "error"
    failure: Policy = "error"
    max_age: float | None = None
    pods: PodsSpec | None = None
    schedule: ScheduleSpec | None = None
    #: (reason, message) when the server refuses the spec; None when valid
    refusal: tuple[str, str] | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): the object's identity."""
        return (self.namespace, self.name)

    @property
    def age_order(self) -> tuple[str, str]:
        """The order of two definitions of one metric: the older (then the first name) wins."""
        return (self.created, self.name)


def selector_of(spec: Any) -> Selector:
    """A `metav1.LabelSelector` (matchLabels, matchExpressions) as a `Selector`; `Refused`
    (InvalidSelector) naming the term that is not one. The empty selector selects every pod of
    the namespace. O(terms)."""
    if spec is None:
        return EVERYTHING
    if not isinstance(spec, Mapping):
        raise Refused("InvalidSelector", "spec.source.pods.selector is not a label selector")
    requirements = []
    try:
        for key, value in sorted((spec.get("matchLabels") or {}).items()):
            requirements.append(new_requirement(str(key), Operator.EQUALS, [str(value)]))
        for index, term in enumerate(spec.get("matchExpressions") or ()):
            operator = _OPERATORS.get(str(term.get("operator")))
            if operator is None:
                raise Refused(
                    "InvalidSelector",
                    f"spec.source.pods.selector.matchExpressions[{index}].operator: "
                    f"{term.get('operator')!r} is not In, NotIn, Exists or DoesNotExist",
                )
            values = [str(value) for value in term.get("values") or ()]
            requirements.append(new_requirement(str(term.get("key")), operator, values))
    except SelectorError as err:
        raise Refused("InvalidSelector", f"spec.source.pods.selector: {err}") from None
    except (AttributeError, TypeError):
        raise Refused("InvalidSelector", "spec.source.pods.selector is malformed") from None
    return Selector(tuple(sorted(requirements, key=lambda requirement: requirement.key)))


def _minutes(text: Any, where: str) -> int:
    match = _CLOCK.fullmatch(str(text))
    if match is None:
        raise Refused("InvalidSchedule", f"{where}: {text!r} is not HH:MM")
    if text == "24:00":
        return 24 * 60
    return int(match.group(1)) * 60 + int(match.group(2))


def _schedule(spec: Mapping[str, Any]) -> ScheduleSpec:
    name = str(spec.get("timeZone") or "UTC")
    try:
        zone = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise Refused(
            "UnknownTimeZone",
            f"spec.source.schedule.timeZone: {name!r} is not a time zone this server knows "
            "(an IANA name such as Europe/Paris)",
        ) from None
    windows = []
    for index, window in enumerate(spec.get("windows") or ()):
        where = f"spec.source.schedule.windows[{index}]"
        start = _minutes(window.get("start"), f"{where}.start")
        end = _minutes(window.get("end"), f"{where}.end")
        if end <= start:
            raise Refused("InvalidSchedule", f"{where}: end must be after start")
        days = frozenset(DAYS.index(day) for day in window.get("days") or () if day in DAYS)
        windows.append(Window(days, start, end, float(window["value"])))
    default = spec.get("defaultValue")
    return ScheduleSpec(zone, tuple(windows), None if default is None else float(default))


def _pods(spec: Mapping[str, Any]) -> PodsSpec:
    port = spec.get("port")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not (isinstance(port, int) and 0 < port < 65536) and not isinstance(port, str):
        raise Refused("InvalidPort", f"spec.source.pods.port: {port!r} is not a port")
    path = str(spec.get("path") or "/metrics")
    if not path.startswith("/"):
        raise Refused("InvalidPath", f"spec.source.pods.path: {path!r} does not start with /")
    return PodsSpec(
        selector=selector_of(spec.get("selector")),
        port=port,
        path=path,
        metric=str(spec["metric"]),
        counter=spec.get("type") == "counter",
    )


def _served_as(spec: Mapping[str, Any]) -> ServedAs:
    kind = spec.get("type")
    if kind not in ("External", "Pods", "Object"):
        raise Refused("InvalidSpec", f"spec.servedAs.type: {kind!r} is not served")
    workload = None
    if kind == "Object":
        described = spec.get("describedObject") or {}
        resource = _WORKLOADS.get(str(described.get("kind")))
        if resource is None or not described.get("name"):
            raise Refused("InvalidSpec", "spec.servedAs.describedObject names no workload")
        workload = (resource, str(described["name"]))
    return ServedAs(kind, workload, "average" if spec.get("podValues") == "average" else "sum")


def _duration(text: Any, where: str, default: float | None) -> float | None:
    if text is None:
        return default
    seconds = go_duration_seconds(str(text))
    if seconds is None or seconds <= 0:
        raise Refused("InvalidSpec", f"{where}: {text!r} is not a positive Go duration")
    return seconds


def _policy(text: Any) -> Policy:
    if text == "zero":
        return "zero"
    return "last-good" if text == "last-good" else "error"


def parse_definition(obj: Mapping[str, Any]) -> Definition:
    """The object as a `Definition`; a spec the server refuses still gives one, with
    `refusal` set, so that its name is known (it shadows nothing, and its state says why).
    KeyError or TypeError only for an object without metadata (not a definition at all)."""
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    created = str(meta.get("creationTimestamp") or "")
    base: dict[str, Any] = {
        "namespace": str(meta["namespace"]),
        "name": str(meta["name"]),
        "uid": str(meta.get("uid") or ""),
        "created": created,
        "generation": int(meta.get("generation") or 0),
        "metric": str(spec.get("metricName") or ""),
    }
    source = spec.get("source") or {}
    source_type = source.get("type")
    member = str(source_type).lower() if source_type in _SOURCES else ""
    refusal: tuple[str, str] | None = None
    served_as = ServedAs("External")
    parts: dict[str, Any] = {}
    try:
        if not base["metric"]:
            raise Refused("InvalidSpec", "spec.metricName is required")
        if not member or not isinstance(source.get(member), Mapping):
            raise Refused("InvalidSpec", f"spec.source: no {member or 'known'} source set")
        served_as = _served_as(spec.get("servedAs") or {})
        interval = _duration(spec.get("interval"), "spec.interval", 30.0)
        parts["interval"] = interval
        parts["max_age"] = _duration(spec.get("maxAge"), "spec.maxAge", None)
        if source_type == "Pods":
            parts["pods"] = _pods(source["pods"])
        elif source_type == "Schedule":
            parts["schedule"] = _schedule(source["schedule"])
        if source_type not in ("Pods", "Prometheus") and served_as.type != "External":
            raise Refused("InvalidSpec", f"a {source_type} source is served as External only")
    except Refused as err:
        refusal = (err.reason, err.message)
    except (KeyError, TypeError, ValueError) as err:
        refusal = ("InvalidSpec", f"spec is malformed ({type(err).__name__}: {err})")
    return Definition(
        **base,
        served_as=served_as,
        source_type=str(source_type or ""),
        source_spec=source.get(member) or {} if member else {},
        interval=parts.pop("interval", 30.0) or 30.0,
        absent=_policy(spec.get("absent")),
        failure=_policy(spec.get("failure")),
        refusal=refusal,
        **parts,
    )


def local_minutes(zone: zoneinfo.ZoneInfo, now: float) -> tuple[int, int]:
    """(weekday, minutes since local midnight) of the instant `now` in `zone`. O(1)."""
    local = datetime.fromtimestamp(now, zone)
    return local.weekday(), local.hour * 60 + local.minute
