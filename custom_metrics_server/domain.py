"""Value types shared by every layer: what a request asks for and what a backend answers.

PURE: no I/O, no web framework. Everything here is immutable (frozen dataclasses with
slots) except the per-sample render cache, which the wire layer owns and fills lazily, and
the last fragments list per key that `fragments` keeps for long answers.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import compress
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol, TypeVar

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

    `cache` holds rendered JSON fragments keyed by item shape; it is filled by the wire
    layer the first time the sample is rendered, so a sample that lives across many
    requests is encoded once. It is excluded from equality and hashing.
    """

    described: ObjectRef
    metric: str
    value: Decimal | int | float
    timestamp: float
    window: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    cache: dict[object, bytes] = field(default_factory=dict, compare=False, repr=False)
    #: False for a sample made for one answer (the encoders then skip the render cache).
    reused: bool = field(default=True, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ExternalSample:
    """One series of an external metric: its labels, value and observation time."""

    metric: str
    labels: Mapping[str, str]
    value: Decimal | int | float
    timestamp: float
    window: int | None = None
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


class _Renderable(Protocol):
    @property
    def cache(self) -> dict[object, bytes]: ...

    @property
    def reused(self) -> bool: ...


R = TypeVar("R", bound=_Renderable)


#: The last fragments list of each key, for long lists (see `fragments`): the encoders' own
#: memo, bounded by the keys in use (shape and echoed selector).
_ALIGNED: dict[str, tuple[Sequence[Any], list[bytes]]] = {}
_ALIGNED_MIN: Final = 64
_ALIGNED_LIMIT: Final = 256


def fragments(samples: Sequence[R], key: str, encode: Callable[[R], bytes]) -> list[bytes]:
    """Each sample's encoded item, memoised on the sample under `key` (a str: its hash is
    computed once per request, not per item) unless the samples are single-use. The cache of a
    sample is bounded: keys carry request-chosen selectors. O(samples).

    A list of at least 64 samples is also compared, position by position and in C, with the
    last list encoded under `key`: where the sample is the same object its fragment is taken
    from that list, so a `pods/*` answer over thousands of pods that changed in a few places
    looks up only those. The caller owns the returned list.

    A memoised fragment is an exact-size copy of what `encode` returned: orjson (3.12 on)
    returns its output in the buffer it wrote it to, at least 4 KiB and up to 10x the length
    (a 300-byte item holds 4,097 bytes), and one fragment is kept per pod asked about, so at
    150,000 pods the HPAs' answers held ~300 MiB of buffer tails. The copy costs 0.2 us, on a
    miss only."""
    if samples and not samples[0].reused:
        return [encode(sample) for sample in samples]
    if len(samples) < _ALIGNED_MIN:  # the usual HPA answer: one sample, or a few dozen
        return [_fragment(sample, key, encode) for sample in samples]
    last = _ALIGNED.get(key)
    if last is not None and len(last[0]) == len(samples):
        out = last[1].copy()
        for i in compress(range(len(samples)), map(is_not, samples, last[0])):
            out[i] = _fragment(samples[i], key, encode)
    else:
        out = [_fragment(sample, key, encode) for sample in samples]
    if len(_ALIGNED) >= _ALIGNED_LIMIT:
        _ALIGNED.clear()
    _ALIGNED[key] = (tuple(samples), out.copy())  # a copy: the caller may reuse its list
    return out


def _fragment(sample: R, key: str, encode: Callable[[R], bytes]) -> bytes:
    cache = sample.cache
    fragment = cache.get(key)
    if fragment is None:
        if len(cache) > 8:
            cache.clear()
        fragment = cache[key] = bytes(memoryview(encode(sample)))
    return fragment


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
