"""Value types shared by every layer: what a request asks for and what a backend answers.

PURE: no I/O, no web framework, no state. Everything here is immutable (frozen dataclasses
with slots), and a sample is not changed after it is made. The one mutable part is a slot:
`Sample.cache` and `ExternalSample.cache` hold a sample's encoded bytes, which the render
caches (`api.render_cache`) own and fill; the values here never read it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from operator import attrgetter
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

if TYPE_CHECKING:
    from custom_metrics_server.machinery.labels import Selector

#: A sample's timestamp, mapped over long answers in C (`max(map(TIMESTAMP, samples))`).
TIMESTAMP: Final = attrgetter("timestamp")

#: The wildcard object name of the Custom Metrics API (`AllObjects` upstream).
ALL_OBJECTS: Final = "*"


class GroupResource(NamedTuple):
    """A resource qualified by its API group, as written in request paths (`deployments.apps`).

    A NamedTuple rather than a frozen dataclass: it is a dictionary key on every hot path and
    tuple hashing and equality run in C (a dataclass `__hash__` is Python code).
    """

    group: str
    resource: str

    @classmethod
    def parse(cls, text: str) -> GroupResource:
        """Split at the first dot, as apimachinery's `ParseGroupResource` does."""
        resource, _, group = text.partition(".")
        return cls(group=group, resource=resource)

    def __str__(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


@dataclass(frozen=True, slots=True)
class ResourceMapping:
    """What the REST mapper knows of one resource: its kind, preferred version and scope."""

    group_resource: GroupResource
    version: str
    kind: str
    namespaced: bool
    singular: str = ""

    @property
    def api_version(self) -> str:
        """`apiVersion` of the objects, in the correct Kubernetes form (`v1`, `apps/v1`)."""
        group = self.group_resource.group
        return f"{group}/{self.version}" if group else self.version


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The `describedObject` of a metric value (a core/v1 ObjectReference subset)."""

    kind: str
    namespace: str
    name: str
    api_version: str


#: Identity of an object inside one resource: (namespace or "" for cluster scope, name).
ObjectKey = tuple[str, str]


class MetricInfo(NamedTuple):
    """One metric a backend can serve for one resource (`CustomMetricInfo` upstream); a
    NamedTuple for C-speed hashing, as `GroupResource`."""

    group_resource: GroupResource
    namespaced: bool
    metric: str


class ItemShape(enum.Enum):
    """The JSON shape of a MetricValueList item; v1alpha1 shares v1beta1's shape."""

    V1BETA1 = "v1beta1"
    V1BETA2 = "v1beta2"


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one metric for one object, at the time it was observed.

    `cache` is the slot of the sample's encoded items, owned by `api.render_cache` (filled the
    first time the sample is encoded, so a sample that lives across many requests is encoded
    once); it is excluded from equality and hashing.
    """

    described: ObjectRef
    metric: str
    value: Decimal | int | float
    timestamp: float
    window: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The slot of the sample's encoded items (`api.render_cache`); not part of its value.
    cache: dict[object, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: False for a sample made for one answer (the encoders then skip the render caches).
    reused: bool = field(default=True, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ExternalSample:
    """One series of an external metric: its labels, value and observation time."""

    metric: str
    labels: Mapping[str, str]
    value: Decimal | int | float
    timestamp: float
    window: int | None = None
    #: The slot of the series' encoded items (see `Sample.cache`).
    cache: dict[object, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: False for a sample made for one answer (see `Sample.reused`).
    reused: bool = field(default=True, compare=False, repr=False)


class TimedSamples(list[Sample]):
    """Samples that know their oldest and newest timestamps. A long answer kept up to date
    change by change (`pods/*` over thousands of pods) returns one, sparing the engine and the
    endpoint a pass each over every sample (at 150,000 pods each sample read is a cache
    miss)."""

    __slots__ = ("newest", "oldest")

    def __init__(self, samples: Iterable[Sample], oldest: float, newest: float) -> None:
        super().__init__(samples)
        self.oldest, self.newest = oldest, newest


def newest_timestamp(samples: Sequence[Sample]) -> float:
    """The newest timestamp of a non-empty answer. O(1) for one sample or `TimedSamples`,
    else O(samples)."""
    if len(samples) == 1:
        return samples[0].timestamp
    if isinstance(samples, TimedSamples):
        return samples.newest
    newest: float = max(map(TIMESTAMP, samples))
    return newest


def oldest_timestamp(samples: Sequence[Sample]) -> float:
    """The oldest timestamp of a non-empty answer; see `newest_timestamp`."""
    if len(samples) == 1:
        return samples[0].timestamp
    if isinstance(samples, TimedSamples):
        return samples.oldest
    oldest: float = min(map(TIMESTAMP, samples))
    return oldest


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRequest:
    """A parsed custom-metrics value request (forms R1, R2 and R3 of the contract).

    `resource` is the raw `{resource}` path segment; `namespace` is None for the
    cluster-scoped URL forms. Namespace metrics (R3) arrive here already rewritten to
    resource `namespaces`, name = the namespace, as the Go handler does.
    """

    group: str
    version: str
    resource: str
    namespace: str | None
    name: str
    metric: str
    label_selector: Selector
    metric_selector: Selector

    @property
    def wildcard(self) -> bool:
        """Whether the request names every object (`*`) rather than one."""
        return self.name == ALL_OBJECTS


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalMetricRequest:
    """A parsed external-metrics request: `/namespaces/{ns}/{metric}?labelSelector=`."""

    namespace: str
    metric: str
    metric_selector: Selector


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendRequest:
    """What a backend is asked for: one metric of concrete objects (never the wildcard)."""

    metric: MetricInfo
    mapping: ResourceMapping
    objects: tuple[ObjectKey, ...]
    metric_selector: Selector


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalBackendRequest:
    """What a backend is asked for an external metric."""

    metric: str
    namespace: str
    metric_selector: Selector


#: What a failure policy answers instead of the plain outcome (`FailurePolicy`).
PolicyAnswer = Literal["error", "zero", "last-good"]
POLICY_ANSWERS: Final = ("error", "zero", "last-good")


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """What a metric answers when its value is absent or its backend fails (docs/operations.md,
    "Failure policy"): `error` (the plain outcome: 404, an empty list, 503, 504), `zero` (the
    value 0, observed now) or `last-good` (the last value served, while it is at most `max_age`
    old). A sample older than `max_age` seconds is treated as absent. `source` says where it
    was configured (`backends[1].routes[0]`, `rules[2]`), for explanations and the status page.
    """

    absent: PolicyAnswer = "error"
    failure: PolicyAnswer = "error"
    max_age: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for what, answer in (("absent", self.absent), ("failure", self.failure)):
            if answer not in POLICY_ANSWERS:
                raise ValueError(f"{what}: must be error, zero or last-good, not {answer!r}")
        if self.max_age is not None and not self.max_age > 0:
            raise ValueError(f"maxAge: must be above zero, not {self.max_age!r}")
        if "last-good" in (self.absent, self.failure) and self.max_age is None:
            raise ValueError("last-good needs maxAge (how old a value may be served)")

    @property
    def inert(self) -> bool:
        """Whether it changes nothing (today's behaviour: errors, no age limit)."""
        return self.absent == "error" and self.failure == "error" and self.max_age is None

    def describe(self) -> str:
        """`absent: zero, failure: last-good, maxAge: 5m0s` (what is not the default)."""
        parts = [f"absent: {self.absent}", f"failure: {self.failure}"]
        if self.max_age is not None:
            parts.append(f"maxAge: {self.max_age:g}s")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether a component has synced; `reason` says what it waits for when not, or, on a
    ready component, what is degraded (shown by `/readyz?verbose`, never failing it)."""

    ready: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated (or anonymous) caller."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
