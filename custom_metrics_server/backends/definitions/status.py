"""What a definition's `.status` says (the CRD's status schema, docs/metric-definitions.md
"The status"), computed from its `catalog.State`, and the Event of a `Ready` transition.

`desired(state, previous, now)` is the whole status document the server would write now;
`previous` is the status the object has (as the watch or the last write delivered it), whose
conditions keep their `lastTransitionTime` while their `status` is unchanged (metav1
`SetStatusCondition`). `significant(status)` is the part whose change is written at once (the
conditions' type, status and reason, `observedGeneration`, the route); the rest (values,
messages, errors) is written at most once a minute (`status_writer`).

A serving definition whose source has not answered yet (`pending`: neither a value nor an
error, within its first interval) gets no status, so a new definition's first status is its
source's first answer, not "no value" and then, a second later, "serving" (with two Events).

PURE: no I/O. Cost: O(conditions) per definition.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

from custom_metrics_server.backends.definitions.shadowing import REASON
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.machinery.quantity import format_quantity

__all__ = [
    "GROUP_VERSION",
    "desired",
    "pending",
    "ready_event",
    "routine_of",
    "significant",
    "significant_of",
    "time_text",
]

GROUP_VERSION: Final = "metrics.custom-metrics-server.io/v1alpha1"
#: The CRD's caps (`maxLength`) on free text.
_MESSAGE_CAP: Final = 32768
_ERROR_CAP: Final = 4096


def time_text(timestamp: float) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    return dt.datetime.fromtimestamp(int(timestamp), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pending(state: State, now: float) -> bool:
    """Serving, but no answer from its source yet: not read yet, or neither a value nor an
    error within its first interval (a `pods` source's scraper answers after the first tick)."""
    if not state.serving or state.last_error is not None or state.last_value is not None:
        return False
    return state.next_refresh == 0.0 or now < state.next_refresh


def _valid(state: State) -> tuple[str, str, str]:
    if state.valid:
        return "True", "Accepted", "the server accepted the spec"
    return "False", state.reason, state.message


def _ready_kind(state: State) -> tuple[str, str]:
    """`Ready`'s (status, reason), without its message (the writer's cheap comparison)."""
    if not state.valid:
        return "False", "NotValid"
    if state.platform is not None:
        return "False", REASON
    if state.shadowed_by is not None:
        return "False", "Shadowed"
    if state.source is None:
        return "Unknown", "Pending"
    if state.last_error is not None:
        return "False", "SourceFailing"
    if not state.has_value:
        return "False", "NoValue"
    return "True", "Serving"


def _ready(state: State) -> tuple[str, str, str]:
    definition = state.definition
    status, reason = _ready_kind(state)
    if reason == "NotValid":
        message = f"not served: {state.reason}: {state.message}"
    elif reason in ("Shadowed", REASON):
        message = state.message
    elif reason == "Pending":
        message = "the server has not started its source yet"
    elif reason == "SourceFailing":
        message = f"reading the source failed: {state.last_error}"
    elif reason == "NoValue":
        message = f"the {definition.source_type} source has no value now" + (
            f" younger than maxAge ({definition.max_age:g}s)" if definition.max_age else ""
        )
    else:
        message = (
            f"served as the {definition.served_as.type} metric {definition.metric} in "
            f"namespace {definition.namespace}"
        )
    return status, reason, message


def _route_items(state: State) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(_route(state).items()))


def significant_of(state: State) -> tuple[object, ...]:
    """`significant(desired(state, ...))`, without building the status: O(1)."""
    valid = ("True", "Accepted") if state.valid else ("False", state.reason)
    conditions = tuple(sorted((("Ready", *_ready_kind(state)), ("Valid", *valid))))
    return (state.definition.generation, conditions, _route_items(state))


def routine_of(state: State) -> tuple[object, ...]:
    """What a routine write would change (values, errors, messages' inputs), from the state:
    compared with the same at the last write. O(1)."""
    return (
        state.last_value,
        state.value_count,
        None if state.last_value_time is None else int(state.last_value_time),
        state.last_error,
        None if state.last_error_time is None else int(state.last_error_time),
        state.message,
    )


def _condition(
    kind: str,
    found: tuple[str, str, str],
    previous: Mapping[str, Any] | None,
    generation: int,
    now: float,
) -> dict[str, Any]:
    status, reason, message = found
    since = time_text(now)
    if previous is not None and previous.get("status") == status:
        since = str(previous.get("lastTransitionTime") or since)
    return {
        "type": kind,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": since,
        "reason": reason,
        "message": _cap(message, _MESSAGE_CAP),
    }


def _route(state: State) -> dict[str, Any]:
    served = state.definition.served_as
    route: dict[str, Any] = {"api": "external" if served.type == "External" else "custom"}
    if served.type == "Pods":
        route["resource"] = "pods"
    elif served.type == "Object" and served.workload is not None:
        resource = served.workload[0]
        route["resource"] = (
            f"{resource.resource}.{resource.group}" if resource.group else resource.resource
        )
    shadow = state.shadow()
    if shadow is not None:
        route["shadowedBy"] = shadow
    return route


def desired(state: State, previous: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The status to write now (see the module)."""
    definition = state.definition
    before = {
        str(c.get("type")): c for c in previous.get("conditions") or () if isinstance(c, Mapping)
    }
    generation = definition.generation
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "conditions": [
            _condition("Valid", _valid(state), before.get("Valid"), generation, now),
            _condition("Ready", _ready(state), before.get("Ready"), generation, now),
        ],
        "route": _route(state),
    }
    value = state.shown_value()
    if value is not None and state.last_value_time is not None:
        status["lastValue"] = format_quantity(value)
        status["lastValueTime"] = time_text(state.last_value_time)
        status["valueCount"] = state.value_count
    if state.last_error is not None and state.last_error_time is not None:
        status["lastError"] = _cap(state.last_error, _ERROR_CAP)
        status["lastErrorTime"] = time_text(state.last_error_time)
    return status


def significant(status: Mapping[str, Any]) -> tuple[object, ...]:
    """What is written at once when it changes: observedGeneration, each condition's type,
    status and reason, the route."""
    conditions = tuple(
        sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping)
        )
    )
    route = status.get("route") or {}
    routed = tuple(sorted((str(k), str(v)) for k, v in route.items())) if route else ()
    return (status.get("observedGeneration"), conditions, routed)


def _ready_of(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition
    return None


def ready_event(
    state: State, before: Mapping[str, Any], after: Mapping[str, Any]
) -> tuple[str, str, str] | None:
    """(type, reason, note) of the Event for a `Ready` transition from `before` to `after`
    (an object without status counts as Ready absent), or None when `Ready` did not change
    status."""
    new = _ready_of(after)
    old = _ready_of(before)
    if new is None or new.get("status") == "Unknown":
        return None
    if old is not None and old.get("status") == new.get("status"):
        return None
    reason = str(new.get("reason"))
    definition = state.definition
    if new.get("status") == "True":
        value = after.get("lastValue")
        note = f"Ready: {new.get('message')}" + (f" (value {value})" if value else "")
        return "Normal", reason, note
    was = "" if old is None else f" (was {old.get('reason')})"
    note = f"Not ready{was}: {new.get('message')}"
    if definition.served_as.type == "External":
        note += "; an HPA cannot scale on it until it is ready"
    return "Warning", reason, _cap(note, 1024)
