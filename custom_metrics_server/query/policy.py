"""Failure policies: what a metric answers when its value is absent or its backend fails.

A `FailurePolicy` (domain) is configured on a route of the backends file or on a Prometheus
rule; the query layer applies it after the backend's answer (or failure), so that every backend
gets the same semantics:

* `maxAge`: a sample older than it is treated as absent;
* absent (an object the backend has no value for; an external metric with no series):
  `error` keeps the plain outcome (404 for a named object, nothing for a wildcard or an
  external metric), `zero` answers 0 observed now, `last-good` the last value served for that
  object (or series set) while it is at most `maxAge` old;
* failure (the backend's 5xx: unavailable, timed out, a bug): `error` keeps the error, `zero`
  answers 0 for every requested object (one series for an external metric), `last-good` the
  last values still within `maxAge`; when nothing can be answered that way the error stands.

A 400 (the request itself is wrong) is never covered up.

The last good values are kept per (metric, object, metric selector) for custom metrics and per
(metric, namespace, selector) for external ones, only for metrics whose policy says
`last-good`, at most `LAST_GOOD_LIMIT` keys (request-chosen selectors: beyond it the store
starts over). Metrics without a policy pay nothing: the engine never calls this module for them.

PURE: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    FailurePolicy,
    ObjectKey,
    ObjectRef,
    Sample,
)

__all__ = ["LAST_GOOD_LIMIT", "LastGood", "PolicyResult", "apply_custom", "apply_external"]

#: Keys of last good values kept (custom objects and external series sets together).
LAST_GOOD_LIMIT: Final = 100_000


class LastGood:
    """The last values served for metrics whose policy is `last-good` (see the module)."""

    def __init__(self, limit: int = LAST_GOOD_LIMIT) -> None:
        self.limit = limit
        self._custom: dict[tuple[object, ...], Sample] = {}
        self._external: dict[tuple[object, ...], tuple[ExternalSample, ...]] = {}

    def __len__(self) -> int:
        return len(self._custom) + len(self._external)

    def _room(self, adding: int) -> None:
        if len(self) + adding > self.limit:
            self._custom.clear()
            self._external.clear()

    def keep_custom(self, request: BackendRequest, samples: Sequence[Sample]) -> None:
        """Remember each sample as its object's last good value."""
        self._room(len(samples))
        metric, selector = request.metric, str(request.metric_selector)
        for sample in samples:
            key = (metric, sample.described.namespace, sample.described.name, selector)
            self._custom[key] = sample

    def custom(self, request: BackendRequest, key: ObjectKey) -> Sample | None:
        """The last good value of one object, if any."""
        return self._custom.get((request.metric, key[0], key[1], str(request.metric_selector)))

    def keep_external(
        self, request: ExternalBackendRequest, samples: Sequence[ExternalSample]
    ) -> None:
        """Remember the series of one external request."""
        self._room(1)
        self._external[_external_key(request)] = tuple(samples)

    def external(self, request: ExternalBackendRequest) -> tuple[ExternalSample, ...]:
        """The last good series of one external request (none: empty)."""
        return self._external.get(_external_key(request), ())


def _external_key(request: ExternalBackendRequest) -> tuple[object, ...]:
    return (request.metric, request.namespace, str(request.metric_selector))


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """What a policy made of an answer: the samples to serve, how many values it filled in
    (`zero` or `last-good`, by `how`), and how many samples it dropped as older than maxAge."""

    samples: Sequence[Sample] | Sequence[ExternalSample]
    how: str = ""  # "", "zero" or "last-good"
    filled: int = 0
    stale: int = 0


def _fresh(timestamp: float, policy: FailurePolicy, now: float) -> bool:
    return policy.max_age is None or now - timestamp <= policy.max_age


def apply_custom(
    policy: FailurePolicy,
    request: BackendRequest,
    samples: Sequence[Sample] | None,
    *,
    now: float,
    store: LastGood,
) -> PolicyResult:
    """The custom-metrics answer under `policy`: `samples` the backend answered (None: it
    failed). The result keeps the requested objects' order. O(objects)."""
    stale = 0
    by_key: dict[ObjectKey, Sample] = {}
    if samples is not None:
        for answered in samples:
            if not _fresh(answered.timestamp, policy, now):
                stale += 1
                continue
            by_key[(answered.described.namespace, answered.described.name)] = answered
        if by_key and "last-good" in (policy.absent, policy.failure):
            store.keep_custom(request, list(by_key.values()))
    answer = policy.absent if samples is not None else policy.failure
    filled = 0
    out: list[Sample] = []
    sample: Sample | None
    mapping = request.mapping
    for key in request.objects:
        sample = by_key.get(key)
        if sample is None and answer == "zero":
            sample = Sample(
                described=ObjectRef(mapping.kind, key[0], key[1], mapping.api_version),
                metric=request.metric.metric,
                value=Decimal(0),
                timestamp=now,
                reused=False,
            )
            filled += 1
        elif sample is None and answer == "last-good":
            kept = store.custom(request, key)
            if kept is not None and _fresh(kept.timestamp, policy, now):
                sample = kept
                filled += 1
        if sample is not None:
            out.append(sample)
    return PolicyResult(out, answer if filled else "", filled, stale)


def apply_external(
    policy: FailurePolicy,
    request: ExternalBackendRequest,
    samples: Sequence[ExternalSample] | None,
    *,
    now: float,
    store: LastGood,
) -> PolicyResult:
    """The external-metrics answer under `policy` (`samples` None: the backend failed)."""
    stale = 0
    fresh: list[ExternalSample] = []
    if samples is not None:
        for sample in samples:
            if _fresh(sample.timestamp, policy, now):
                fresh.append(sample)
            else:
                stale += 1
        if fresh and "last-good" in (policy.absent, policy.failure):
            store.keep_external(request, fresh)
        if fresh:
            return PolicyResult(fresh, "", 0, stale)
    answer = policy.absent if samples is not None else policy.failure
    if answer == "zero":
        zero = ExternalSample(request.metric, {}, Decimal(0), now, reused=False)
        return PolicyResult([zero], "zero", 1, stale)
    if answer == "last-good":
        kept = [s for s in store.external(request) if _fresh(s.timestamp, policy, now)]
        if kept:
            return PolicyResult(kept, "last-good", len(kept), stale)
    return PolicyResult(fresh, "", 0, stale)
