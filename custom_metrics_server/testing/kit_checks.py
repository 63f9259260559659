"""The conformance kit's checks after the start (`kit` runs them in order): listings answer from
memory, absence is not an error, answers keep the contract, deadlines are honoured, failures
are SDK errors; and the backend under test as the checks share it (`Subject`).

Owns each check's logic; it must not start or stop the backend nor decide strictness (`kit`).
Cost: the listing check times `listing_calls` calls of each listing; the others make one fetch
per listed metric (at most `max_metrics` of each kind), each bounded by `fetch_timeout`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectKey,
    Readiness,
    ResourceMapping,
    Sample,
)
from custom_metrics_server.errors import BackendTimeout, BackendUnavailable, BadRequest
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING, Selector
from custom_metrics_server.plugins.adapter import PluginBackend, with_article
from custom_metrics_server.sdk.backend import ClusterView
from custom_metrics_server.testing.kit_report import Abort, Check, KitReport

__all__ = [
    "Subject",
    "check_absence",
    "check_answers",
    "check_deadlines",
    "check_listings",
    "check_outage",
    "readiness",
]

SDK_ERRORS = (BadRequest, BackendUnavailable, BackendTimeout)


def _absent_key(namespaced: bool) -> ObjectKey:
    suffix = uuid.uuid4().hex[:10]
    return ("kit-absent-namespace" if namespaced else "", f"kit-absent-{suffix}")


async def _sdk_call(check: Check, what: str, call: Awaitable[Any]) -> Any:
    """Await `call`; an SDK error is an allowed answer (None), anything else a problem."""
    try:
        return await call
    except SDK_ERRORS:
        return None
    except TimeoutError:
        check.fail(f"{what} did not answer within the kit's fetch_timeout")
        return None
    except Exception as err:
        check.fail(f"{what} raised {type(err).__name__} (not an SDK error): {err}")
        return None


def _mapping(cluster: ClusterView, resource: GroupResource) -> ResourceMapping:
    found = cluster.mapping(str(resource))
    if found is not None:
        return found
    # A resource the view does not know: a plausible mapping (the backend only reads it).
    kind = resource.resource.rstrip("s").capitalize() or "Object"
    return ResourceMapping(resource, "v1", kind, True)


def readiness(check: Check, backend: object, when: str) -> Readiness | None:
    try:
        state = backend.ready()  # type: ignore[attr-defined]
    except Exception as err:
        check.fail(f"ready() {when} raised {type(err).__name__}: {err}")
        return None
    if not isinstance(state, Readiness):
        check.fail(f"ready() {when} returned {with_article(type(state).__name__)}, not a Readiness")
        return None
    return state


@dataclass
class Subject:
    """The backend under test and what the checks share."""

    hosted: PluginBackend
    backend: object
    view: ClusterView
    objects: Mapping[GroupResource, Sequence[ObjectKey]]
    namespace: str
    fetch_timeout: float
    absent_as_zero: frozenset[str] = frozenset()
    custom: list[MetricInfo] = field(default_factory=list)
    external: list[str] = field(default_factory=list)

    def custom_request(self, info: MetricInfo, *, present: bool = True) -> BackendRequest:
        keys = tuple(self.objects.get(info.group_resource, ())) if present else ()
        return BackendRequest(
            metric=info,
            mapping=_mapping(self.view, info.group_resource),
            objects=keys or (_absent_key(info.namespaced),),
            metric_selector=EVERYTHING,
        )

    def external_request(
        self, name: str, selector: Selector = EVERYTHING
    ) -> ExternalBackendRequest:
        return ExternalBackendRequest(
            metric=name, namespace=self.namespace, metric_selector=selector
        )

    async def fetch(
        self, check: Check, request: BackendRequest, what: str = ""
    ) -> Sequence[Sample]:
        call = asyncio.wait_for(self.hosted.fetch(request), self.fetch_timeout)
        found = await _sdk_call(check, what or f"fetch({request.metric.metric})", call)
        return found or ()

    async def fetch_external(
        self, check: Check, request: ExternalBackendRequest, what: str = ""
    ) -> Sequence[ExternalSample]:
        call = asyncio.wait_for(self.hosted.fetch_external(request), self.fetch_timeout)
        found = await _sdk_call(check, what or f"fetch_external({request.metric})", call)
        return found or ()


def check_listings(
    report: KitReport, subject: Subject, budget: float, calls: int, max_metrics: int
) -> None:
    caps = subject.hosted.capabilities
    with report.check("listings answer from memory") as check:
        for method, kind, wanted in (
            ("list_metrics", caps.custom, subject.custom),
            ("list_external_metrics", caps.external, subject.external),
        ):
            if not kind:
                continue
            raw = getattr(subject.backend, method)
            times = []
            for _ in range(max(1, calls)):
                started = time.perf_counter()
                try:
                    raw()
                except Exception as err:
                    check.fail(f"{method}() raised {type(err).__name__}: {err}")
                    raise Abort from err
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            report.listing_seconds = max(report.listing_seconds, median)
            if median > budget:
                check.fail(
                    f"{method}() takes {median * 1e3:.2f} ms a call (budget {budget * 1e3:g} "
                    "ms): list from memory, refresh in the background"
                )
            listed: Collection[Any] = getattr(subject.hosted, method)()
            reason = subject.hosted.ready().reason
            if not listed and reason.startswith(method):
                check.fail(reason)
            wanted.extend(sorted(listed, key=str))
    report.custom_metrics, report.external_metrics = len(subject.custom), len(subject.external)
    del subject.custom[max_metrics:], subject.external[max_metrics:]


async def check_absence(report: KitReport, subject: Subject) -> None:
    with report.check("absence is not an error") as check:
        for info in subject.custom:
            found = await subject.fetch(check, subject.custom_request(info, present=False))
            if info.metric in subject.absent_as_zero:
                found = [sample for sample in found if sample.value != 0]
            if found:
                check.fail(
                    f"fetch({info.metric}) answered {len(found)} samples for an absent object"
                )
        for resource, keys in subject.objects.items():
            if not subject.hosted.capabilities.custom or not keys:
                continue
            info = MetricInfo(resource, bool(keys[0][0]), f"kit_unlisted_{uuid.uuid4().hex[:8]}")
            found = await subject.fetch(check, subject.custom_request(info))
            if found:
                check.fail(
                    f"fetch({info.metric}) answered {len(found)} samples for an unlisted metric"
                )
        unmatchable = parse_selector(f"kit-absent={uuid.uuid4().hex[:10]}")
        for name in subject.external:
            found_series = await subject.fetch_external(
                check, subject.external_request(name, unmatchable)
            )
            if found_series:
                check.fail(
                    f"fetch_external({name}) answered {len(found_series)} series for a selector "
                    "no series can match"
                )
        if subject.hosted.capabilities.external:
            unlisted = f"kit_unlisted_{uuid.uuid4().hex[:8]}"
            found_series = await subject.fetch_external(check, subject.external_request(unlisted))
            if found_series:
                check.fail(
                    f"fetch_external({unlisted}) answered {len(found_series)} series for an "
                    "unlisted metric"
                )


async def check_answers(report: KitReport, subject: Subject) -> None:
    with report.check("answers keep the contract") as check:
        for info in subject.custom:
            keys = tuple(subject.objects.get(info.group_resource, ()))
            if not keys:
                continue
            for sample in await subject.fetch(check, subject.custom_request(info)):
                described = sample.described
                if (described.namespace, described.name) not in keys:
                    check.fail(
                        f"fetch({info.metric}) answered for {described.namespace}/"
                        f"{described.name}, which was not asked for"
                    )
                if sample.metric != info.metric:
                    check.fail(f"fetch({info.metric}) answered a sample of {sample.metric!r}")
        for name in subject.external:
            series = await subject.fetch_external(check, subject.external_request(name))
            for one in series:
                if one.metric != name:
                    check.fail(f"fetch_external({name}) answered a series of {one.metric!r}")
            labels = next((one.labels for one in series if one.labels), None)
            if not labels:
                continue
            key, value = next(iter(labels.items()))
            narrowed = parse_selector(f"{key}={value}")
            what = f"fetch_external({name}) with selector {key}={value}"
            request = subject.external_request(name, narrowed)
            for one in await subject.fetch_external(check, request, what):
                if not narrowed.matches(one.labels):
                    check.fail(f"{what} answered a series labelled {dict(one.labels)}")


async def check_deadlines(report: KitReport, subject: Subject, cancel_within: float) -> None:
    hosted = subject.hosted
    caps = hosted.capabilities
    with report.check("deadlines are honoured") as check:
        calls: list[tuple[str, bool, Callable[[], Awaitable[Any]]]] = [
            (
                f"fetch({info.metric})",
                caps.custom_async,
                _bind(hosted.fetch, subject.custom_request(info)),
            )
            for info in subject.custom[:3]
        ]
        calls += [
            (
                f"fetch_external({name})",
                caps.external_async,
                _bind(hosted.fetch_external, subject.external_request(name)),
            )
            for name in subject.external[:3]
        ]
        for what, is_async, call in calls:
            if is_async:
                await _cancellation(check, what, call, cancel_within)
            else:
                await _sdk_call(check, what, asyncio.wait_for(call(), subject.fetch_timeout))


async def check_outage(
    report: KitReport,
    subject: Subject,
    outage: Callable[[], AbstractAsyncContextManager[Any]],
) -> None:
    with report.check("failures are SDK errors") as check:
        async with outage():
            for info in subject.custom[:3]:
                what = f"fetch({info.metric}) during the outage"
                await subject.fetch(check, subject.custom_request(info), what)
            for name in subject.external[:3]:
                what = f"fetch_external({name}) during the outage"
                await subject.fetch_external(check, subject.external_request(name), what)


def _bind(
    function: Callable[[Any], Awaitable[Any]], argument: object
) -> Callable[[], Awaitable[Any]]:
    def call() -> Awaitable[Any]:
        return function(argument)

    return call


async def _cancellation(
    check: Check, what: str, call: Callable[[], Awaitable[Any]], within: float
) -> None:
    """Cancel the call once it is running; it must stop, as cancelled, within `within`."""
    task = asyncio.ensure_future(call())
    for _ in range(3):
        await asyncio.sleep(0)
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: a finished call has nothing to cancel
        return
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=within)
    if not done:
        check.fail(f"{what} still ran {within:g}s after it was cancelled at its deadline")
        return
    if not task.cancelled():
        error = task.exception()
        if error is None:
            check.fail(f"{what} swallowed its cancellation and returned a result")
        elif not isinstance(error, SDK_ERRORS):
            check.fail(f"{what}, cancelled, raised {type(error).__name__}: {error}")
