"""Why a metric request found nothing, in short sentences: the `details.causes` of a 404 and the
causes of an explanation.

A cause is a Kubernetes `StatusCause` (`{"reason": ..., "message": ...}`); the Status message
itself keeps upstream's wording byte for byte (clients match on it). Reasons:

* `MetricNotServed`: no backend serves the metric for this resource ("no backend serves metric
  X for pods; did you mean Y"), with the resources that do list it;
* `ResourceNotFound`: the cluster view has no REST mapping for the resource;
* `NoObjects`: the label selector matched no object;
* `NoValue`: the backend has no value for the object(s) asked;
* `StaleValues`: values older than the policy's maxAge were treated as absent;
* `BackendFailing`: the backend's last failed call, and how long ago;
* `PolicyAnswered`: the failure policy answered instead of the backend.

Suggestions are the nearest listed names by edit distance (at most 2 edits, or a third of
the name, and never more than `MAX_CANDIDATES` names scanned). Computed on the error path and
for explanations only.

PURE: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

__all__ = [
    "MAX_CANDIDATES",
    "age",
    "cause",
    "edit_distance",
    "nearest",
]

#: Names scanned for a suggestion at most (a listing of a million series must not make a 404
#: cost seconds).
MAX_CANDIDATES: Final = 20_000


def cause(reason: str, message: str, field: str = "") -> dict[str, Any]:
    """A `StatusCause` as JSON (Go's field order: reason, message, field; empty ones left out)."""
    found: dict[str, Any] = {"reason": reason, "message": message}
    if field:
        found["field"] = field
    return found


def edit_distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance of `a` and `b`, or `limit + 1` as soon as it must exceed `limit`.
    O(len(a) * (2 * limit + 1))."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    if len(a) > len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i] + [limit + 1] * len(b)
        low, high = max(1, i - limit), min(len(b), i + limit)
        best = current[0] if low == 1 else limit + 1
        for j in range(low, high + 1):
            cost = 0 if char_a == b[j - 1] else 1
            value = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            current[j] = value
            best = min(best, value)
        if best > limit:
            return limit + 1
        previous = current
    return previous[len(b)] if previous[len(b)] <= limit else limit + 1


def nearest(name: str, candidates: Iterable[str], *, count: int = 3) -> list[str]:
    """Up to `count` candidates nearest to `name` by edit distance (ties by name), within
    max(2, len(name) // 3) edits; a candidate that contains `name` or is contained in it
    (a missing prefix or suffix) counts as near too."""
    limit = max(2, len(name) // 3)
    lowered = name.lower()
    scored: list[tuple[int, str]] = []
    for scanned, candidate in enumerate(candidates):
        if scanned >= MAX_CANDIDATES:
            break
        if candidate == name:
            continue
        distance = edit_distance(lowered, candidate.lower(), limit)
        if distance > limit and len(name) >= 4 and len(candidate) >= 4:
            low = candidate.lower()
            if lowered in low or low in lowered:
                distance = limit
        if distance <= limit:
            scored.append((distance, candidate))
    scored.sort()
    return [candidate for _, candidate in scored[:count]]


def age(seconds: float) -> str:
    """A short age: `850ms`, `12s`, `5m3s`, `2h5m`, `3d4h`."""
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def quoted_list(names: Sequence[str], limit: int = 5) -> str:
    """`a, b, c` (and `and 4 more`)."""
    shown = ", ".join(names[:limit])
    if len(names) > limit:
        shown += f" and {len(names) - limit} more"
    return shown
