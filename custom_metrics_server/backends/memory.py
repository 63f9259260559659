"""Values held in memory: the smallest backend, the test double, and the store the simulated
cluster publishes into.

A `Snapshot` is an immutable set of values taken at one time; `MemoryBackend.publish()` swaps
it in atomically, so a request sees either the old or the new snapshot, never a mix. Within a
snapshot each object keeps its total `Sample` (pre-built, so its rendered JSON is cached across
requests) and its series, for requests with a `metricLabelSelector`.

Cost: `fetch` is O(objects requested) dictionary lookups without a metric selector, plus
O(series per object) selector checks with one; `list_metrics` returns a prebuilt frozenset.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from types import TracebackType
from typing import Any, Self

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    MetricInfo,
    ObjectKey,
    Readiness,
    Sample,
)
from custom_metrics_server.machinery.quantity import Quantity
from custom_metrics_server.runtime.tasks import drain

Number = Decimal | int | float


@dataclass(frozen=True, slots=True)
class ObjectValues:
    """One object's value of one metric: the total and the series it sums."""

    total: Sample
    series: tuple[tuple[Mapping[str, str], Number], ...]


@dataclass(frozen=True, slots=True)
class ExternalSeries:
    """One external series; `namespace` None means visible from every namespace."""

    namespace: str | None
    sample: ExternalSample


@dataclass(frozen=True)
class Snapshot:
    """Every value of a backend at one moment."""

    custom: Mapping[MetricInfo, Mapping[ObjectKey, ObjectValues]] = field(default_factory=dict)
    external: Mapping[str, tuple[ExternalSeries, ...]] = field(default_factory=dict)
    metrics: frozenset[MetricInfo] = field(init=False)
    external_metrics: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", frozenset(self.custom))
        object.__setattr__(self, "external_metrics", frozenset(self.external))


class SnapshotBuilder:
    """Collects series for objects of a cluster, then builds an immutable `Snapshot`."""

    def __init__(self, cluster: InMemoryCluster, *, timestamp: float) -> None:
        self._cluster = cluster
        self._timestamp = timestamp
        self._custom: dict[MetricInfo, dict[ObjectKey, list[tuple[Mapping[str, str], Number]]]]
        self._custom = {}
        self._windows: dict[MetricInfo, int | None] = {}
        self._external: dict[str, list[ExternalSeries]] = {}

    def declare(self, resource: str, metric: str, *, window: int | None = None) -> MetricInfo:
        """Announce a metric for a resource (listed in discovery even with no values yet)."""
        mapping = self._cluster.mapping(resource)
        if mapping is None:
            raise ValueError(f"unknown resource {resource!r}")
        info = MetricInfo(mapping.group_resource, mapping.namespaced, metric)
        self._custom.setdefault(info, {})
        self._windows[info] = window
        return info

    def add(
        self,
        info: MetricInfo,
        key: ObjectKey,
        value: Number,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        """Add one series of `info` for the object `key` (namespace, name). O(1)."""
        table = self._custom[info]
        series = table.get(key)
        if series is None:
            table[key] = [(labels or {}, value)]
        else:
            series.append((labels or {}, value))

    def add_external(
        self,
        metric: str,
        value: Number,
        *,
        labels: Mapping[str, str] | None = None,
        namespace: str | None = None,
        window: int | None = None,
    ) -> None:
        """Add one external series."""
        sample = ExternalSample(
            metric=metric,
            labels=dict(labels or {}),
            value=value,
            timestamp=self._timestamp,
            window=window,
        )
        self._external.setdefault(metric, []).append(ExternalSeries(namespace, sample))

    def build(self) -> Snapshot:
        """Freeze the collected series; O(series)."""
        return drain(self.build_steps())

    def build_steps(self, *, chunk: int = 1024) -> Generator[None, None, Snapshot]:
        """`build()` as a generator that pauses every `chunk` objects, so a caller on an
        event loop can let requests run between slices of a large build."""
        custom: dict[MetricInfo, dict[ObjectKey, ObjectValues]] = {}
        timestamp = self._timestamp
        for info, objects in self._custom.items():
            records = self._cluster.inventory.table(info.group_resource)
            metric, window = info.metric, self._windows[info]
            values: dict[ObjectKey, ObjectValues] = {}
            for key, series in objects.items():
                record = records.get(key)
                if record is None:
                    raise ValueError(f"no object {key} of {info.group_resource} in the cluster")
                if len(series) == 1:
                    labels, total = series[0]
                else:
                    labels, total = {}, _sum(value for _, value in series)
                sample = Sample(record.ref, metric, total, timestamp, window, labels)
                values[key] = ObjectValues(total=sample, series=tuple(series))
                if len(values) % chunk == 0:
                    yield
            custom[info] = values
        external = {metric: tuple(series) for metric, series in self._external.items()}
        return Snapshot(custom=custom, external=external)


def _sum(values: Iterable[Number]) -> Number:
    total: Number = 0
    for value in values:
        # Series of one metric share one number type; mixing Decimal and float is a caller bug.
        total = total + value  # type: ignore[operator]
    return total


class MemoryBackend:
    """Serves whatever snapshot was last published."""

    def __init__(self, name: str = "memory", snapshot: Snapshot | None = None) -> None:
        self.name = name
        self._snapshot = snapshot or Snapshot()

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot being served."""
        return self._snapshot

    def publish(self, snapshot: Snapshot) -> None:
        """Swap in a new snapshot atomically."""
        self._snapshot = snapshot

    def list_metrics(self) -> Collection[MetricInfo]:
        """See `MetricsBackend.list_metrics`."""
        return self._snapshot.metrics

    def list_external_metrics(self) -> Collection[str]:
        """See `MetricsBackend.list_external_metrics`."""
        return self._snapshot.external_metrics

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """See `MetricsBackend.fetch`."""
        table = self._snapshot.custom.get(request.metric)
        if not table:
            return ()
        selector = request.metric_selector
        if not selector.requirements:  # selects everything (read without a call: hot path)
            return [values.total for key in request.objects if (values := table.get(key))]
        found = []
        for key in request.objects:
            values = table.get(key)
            if values is None:
                continue
            matching = [
                (labels, value) for labels, value in values.series if selector.matches(labels)
            ]
            if matching:
                total = values.total
                found.append(
                    Sample(
                        described=total.described,
                        metric=total.metric,
                        value=_sum(value for _, value in matching),
                        timestamp=total.timestamp,
                        window=total.window,
                        labels=matching[0][0] if len(matching) == 1 else {},
                    )
                )
        return found

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """See `MetricsBackend.fetch_external`: series of the namespace and global ones."""
        selector = request.metric_selector
        return [
            series.sample
            for series in self._snapshot.external.get(request.metric, ())
            if series.namespace in (None, request.namespace)
            and selector.matches(series.sample.labels)
        ]

    def ready(self) -> Readiness:
        """Memory is always ready."""
        return Readiness(ready=True)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


def cluster_of(objects: Iterable[Mapping[str, Any]]) -> InMemoryCluster:
    """A cluster view holding `objects` (`[{resource, name, namespace?, labels?}]`, `resource`
    as in request paths); a bad entry is a ValueError naming it (`objects[i]: ...`).
    O(objects)."""
    cluster = InMemoryCluster()
    for index, entry in enumerate(objects):
        try:
            cluster.add(
                entry["resource"],
                entry["name"],
                namespace=entry.get("namespace") or "",
                labels=entry.get("labels") or {},
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"objects[{index}]: {err}") from None
    return cluster


def load_fixture(
    document: Mapping[str, Any], *, now: float
) -> tuple[InMemoryCluster, MemoryBackend]:
    """A cluster and a backend from a fixture document (the `--demo-file` YAML).

    Shape: `objects: [{resource, name, namespace?, labels?}]`, `metrics: [{resource, metric,
    window?}]` (declared even without values), `values: [{resource, metric, name,
    namespace?, value, labels?}]`, `external: [{metric, value, labels?, namespace?, window?}]`,
    and an optional `timestamp` (RFC 3339) for every value, else `now`. Other keys are
    ignored. Errors name the entry.
    """
    timestamp = now
    if document.get("timestamp"):
        parsed = dt.datetime.fromisoformat(str(document["timestamp"]).replace("Z", "+00:00"))
        timestamp = parsed.timestamp()
    try:
        cluster = cluster_of(document.get("objects") or ())
    except ValueError as err:
        raise ValueError(f"invalid fixture at {err}") from err
    builder = SnapshotBuilder(cluster, timestamp=timestamp)
    where = "the document"
    try:
        infos: dict[tuple[str, str], MetricInfo] = {}

        def declare(resource: str, metric: str, window: int | None = None) -> MetricInfo:
            key = (resource, metric)
            if key not in infos:
                infos[key] = builder.declare(resource, metric, window=window)
            return infos[key]

        for index, entry in enumerate(document.get("metrics") or ()):
            where = f"metrics[{index}]"
            declare(entry["resource"], entry["metric"], entry.get("window"))
        for index, entry in enumerate(document.get("values") or ()):
            where = f"values[{index}]"
            info = declare(entry["resource"], entry["metric"], entry.get("window"))
            key = (entry.get("namespace", ""), entry["name"])
            builder.add(info, key, _number(entry["value"]), entry.get("labels") or {})
        for index, entry in enumerate(document.get("external") or ()):
            where = f"external[{index}]"
            builder.add_external(
                entry["metric"],
                _number(entry["value"]),
                labels=entry.get("labels") or {},
                namespace=entry.get("namespace"),
                window=entry.get("window"),
            )
        snapshot = builder.build()
    except (KeyError, TypeError, ValueError, ArithmeticError) as err:
        raise ValueError(f"invalid fixture at {where}: {err!r}") from err
    return cluster, MemoryBackend(name="memory", snapshot=snapshot)


def _number(value: object) -> Number:
    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, int | float | Decimal):
        return value
    return Quantity.parse(str(value)).value
