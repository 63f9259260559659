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
8. **a changed listing is served** (only with `change_listing`, a function or coroutine
   function that changes what your source holds so that your listing must change): what the
   server would route and list in discovery changes within `listing_within` seconds
   (`kit_listing`);
9. **stop**: `__aexit__` returns.

The real-server half of the kit is `custom_metrics_server.testing.serving`. This module runs the
start, the checks (`kit_checks`) and the stop; the report types are in `kit_report` and are
re-exported here, since backend authors import them from the kit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource, ObjectKey
from custom_metrics_server.plugins.adapter import PluginBackend, PluginError
from custom_metrics_server.sdk.backend import ClusterView
from custom_metrics_server.testing.kit_checks import (
    Subject,
    check_absence,
    check_answers,
    check_deadlines,
    check_listings,
    check_outage,
    readiness,
)
from custom_metrics_server.testing.kit_listing import check_listing_change
from custom_metrics_server.testing.kit_report import Check, KitFailure, KitReport

__all__ = ["Check", "KitFailure", "KitReport", "check_backend"]


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
    change_listing: Callable[[], object] | None = None,
    listing_within: float = 10.0,
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
            before = readiness(check, backend, "before the start")
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
    subject = Subject(
        hosted=hosted,
        backend=backend,
        view=view,
        objects=objects or {},
        namespace=namespace,
        fetch_timeout=fetch_timeout,
        absent_as_zero=frozenset(absent_as_zero),
    )
    try:
        check_listings(report, subject, listing_budget, listing_calls, max_metrics)
        await check_absence(report, subject)
        await check_answers(report, subject)
        await check_deadlines(report, subject, cancel_within)
        if outage is not None:
            await check_outage(report, subject, outage)
        if change_listing is not None:
            await check_listing_change(report, hosted, backend, change_listing, listing_within)
    finally:
        with report.check("stop"):
            await asyncio.wait_for(hosted.__aexit__(None, None, None), fetch_timeout)
    return _finish(report, strict)


def _finish(report: KitReport, strict: bool) -> KitReport:
    if strict and not report.ok:
        raise KitFailure(report)
    return report
