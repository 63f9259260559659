"""The conformance kit, in process: what a backend author runs against their backend.

    report = await check_backend(make(Settings(...)), objects={sdk.GroupResource("", "pods"):
                                                                 [("default", "web-0")]})

`check_backend` starts the backend as the server would (through the same adapter, so plain
functions run in a thread pool and answers are checked the same way), runs the checks below and
stops it. It raises `KitFailure` listing every failed check (or returns the report with
`strict=False`).

1. **it is a backend**: it has a source (a listing and its fetch), as the loader requires;
2. **start**: `__aenter__` (if any) returns; `ready()` never raises, answers a `Readiness`,
   and becomes ready within `ready_within` seconds (with `expect_not_ready_before_start`, it
   must also say not-ready before the start: readiness moves from not-ready to ready);
3. **listings answer from memory**: `list_metrics()` / `list_external_metrics()` never raise,
   return the contract's types, and take at most `listing_budget` seconds a call (median of
   `listing_calls` calls);
4. **absence is not an error**: every listed metric (at most `max_metrics` of each kind),
   fetched for objects that do not exist, answers no sample and raises nothing; an external
   metric fetched with a selector no series can match answers no series; a metric the backend
   does not list (a route may send it one) answers nothing, for `objects` too
   (`absent_as_zero` names metrics configured to answer 0 for an absent object, as a
   Prometheus rule with `absent: zero` does);
5. **answers keep the contract**: every listed custom metric fetched for `objects` of its
   resource answers at most one sample per object, each describing a requested object with
   the requested metric and a number; every listed external metric's series match the
   selector asked and carry the requested metric's name;
6. **deadlines are honoured**: an `async` fetch cancelled while it runs stops within
   `cancel_within` seconds and does not swallow the cancellation; a plain-function fetch
   returns within `fetch_timeout`;
7. **failures are SDK errors**: anything a fetch raises, here or during `outage()` (an async
   context manager in which your source is down, if you give one), is `BadRequest`,
   `BackendUnavailable` or `BackendTimeout`, never another exception;
8. **stop**: `__aexit__` returns.

The real-server half of the kit is `custom_metrics_server.testing.serving`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from custom_metrics_server.cluster.in_memory import InMemoryCluster
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
from custom_metrics_server.plugins.adapter import PluginBackend, PluginError
from custom_metrics_server.sdk.backend import ClusterView

__all__ = ["Check", "KitFailure", "KitReport", "check_backend"]

SDK_ERRORS = (BadRequest, BackendUnavailable, BackendTimeout)


class KitFailure(AssertionError):
    """Some checks failed; the message lists them."""

    def __init__(self, report: KitReport) -> None:
        super().__init__(report.summary())
        self.report = report


@dataclass
class Check:
    """One check's outcome."""

    name: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        """Record a problem (the check fails)."""
        self.ok = False
        self.problems.append(problem)


@dataclass
class KitReport:
    """Every check, and what was measured."""

    checks: list[Check] = field(default_factory=list)
    #: median seconds of one listing call (the larger of the two kinds)
    listing_seconds: float = 0.0
    #: seconds from the start until `ready()` said ready
    ready_after: float = 0.0
    custom_metrics: int = 0
    external_metrics: int = 0

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.ok for check in self.checks)

    def summary(self) -> str:
        """One line per check, its problems below it."""
        lines = []
        for check in self.checks:
            lines.append(f"{'ok  ' if check.ok else 'FAIL'} {check.name}")
            lines += [f"       {problem}" for problem in check.problems]
        return "\n".join(lines)

    @contextmanager
    def check(self, name: str) -> Iterator[Check]:
        """A check that fails on any unexpected exception (named in the problem)."""
        current = Check(name)
        self.checks.append(current)
        try:
            yield current
        except _Abort:
            pass
        except Exception as err:
            current.fail(f"raised {type(err).__name__}: {err}")


class _Abort(Exception):
    """Stop a check after a problem that makes the rest meaningless."""


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


async def check_backend(
    backend: object,
    *,
    objects: Mapping[GroupResource, Sequence[ObjectKey]] | None = None,
    namespace: str = "default",
    cluster: ClusterView | None = None,
    ready_within: float = 30.0,
    expect_not_ready_before_start: bool = False,
    listing_budget: float = 0.001,
    listing_calls: int = 200,
    max_metrics: int = 50,
    fetch_timeout: float = 10.0,
    cancel_within: float = 1.0,
    outage: Callable[[], AbstractAsyncContextManager[Any]] | None = None,
    absent_as_zero: Collection[str] = (),
    strict: bool = True,
) -> KitReport:
    """Run the checks of the module on `backend` (a plugin object or a built-in backend)."""
    report = KitReport()
    view = cluster or InMemoryCluster()
    with report.check("it is a backend") as check:
        try:
            hosted = PluginBackend(backend, name="kit", threads=4)
        except PluginError as err:
            check.fail(str(err))
            return _finish(report, strict)
    caps = hosted.capabilities
    with report.check("start, and readiness moves to ready") as check:
        if caps.readiness:
            before = _readiness(check, backend, "before the start")
            if expect_not_ready_before_start and before is not None and before.ready:
                check.fail("ready() said ready before the backend was started")
        started = time.monotonic()
        try:
            await asyncio.wait_for(hosted.__aenter__(), fetch_timeout)
        except Exception as err:
            check.fail(f"__aenter__ raised {type(err).__name__}: {err}")
            return _finish(report, strict)
        while True:
            state = hosted.ready()
            if state.ready:
                report.ready_after = time.monotonic() - started
                break
            if time.monotonic() - started > ready_within:
                check.fail(f"not ready after {ready_within:g}s: {state.reason or 'no reason'}")
                break
            await asyncio.sleep(0.05)
    subject = _Subject(
        hosted=hosted,
        backend=backend,
        view=view,
        objects=objects or {},
        namespace=namespace,
        fetch_timeout=fetch_timeout,
        absent_as_zero=frozenset(absent_as_zero),
    )
    try:
        _check_listings(report, subject, listing_budget, listing_calls, max_metrics)
        await _check_absence(report, subject)
        await _check_answers(report, subject)
        await _check_deadlines(report, subject, cancel_within)
        if outage is not None:
            await _check_outage(report, subject, outage)
    finally:
        with report.check("stop"):
            await asyncio.wait_for(hosted.__aexit__(None, None, None), fetch_timeout)
    return _finish(report, strict)


def _finish(report: KitReport, strict: bool) -> KitReport:
    if strict and not report.ok:
        raise KitFailure(report)
    return report


def _readiness(check: Check, backend: object, when: str) -> Readiness | None:
    try:
        state = backend.ready()  # type: ignore[attr-defined]
    except Exception as err:
        check.fail(f"ready() {when} raised {type(err).__name__}: {err}")
        return None
    if not isinstance(state, Readiness):
        check.fail(f"ready() {when} returned a {type(state).__name__}, not a Readiness")
        return None
    return state


@dataclass
class _Subject:
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


def _check_listings(
    report: KitReport, subject: _Subject, budget: float, calls: int, max_metrics: int
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
                    raise _Abort from err
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


async def _check_absence(report: KitReport, subject: _Subject) -> None:
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


async def _check_answers(report: KitReport, subject: _Subject) -> None:
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


async def _check_deadlines(report: KitReport, subject: _Subject, cancel_within: float) -> None:
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


async def _check_outage(
    report: KitReport,
    subject: _Subject,
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
