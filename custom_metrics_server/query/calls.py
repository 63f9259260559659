"""One call to a backend, guarded and counted: the backend's readiness, the per-call deadline,
what a failure becomes, and how the answer or the failure is counted in the metric's stats.

A `StatusError` a backend raises keeps its code and gets the backend's name in front of its
message; a call past its deadline is 504 naming the backend; any other exception (a bug, or an
answer that breaks the contract) is a masked 500 naming the backend, with an `Audit-Id` header
whose value the log line carrying the traceback repeats.

Owns the call and its accounting; it must not route, resolve objects or apply the not-found
policy (`query.engine`). Cost per call: a readiness check, one `asyncio.timeout` scope and two
clock reads (plus the `observe` hook); the failure paths add a status update.

PURE: no I/O of its own (it awaits the backend's call; logging only).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from custom_metrics_server.domain import TIMESTAMP, ExternalSample, Sample
from custom_metrics_server.errors import (
    BackendTimeout,
    BackendUnavailable,
    InternalError,
    StatusError,
)
from custom_metrics_server.query import causes
from custom_metrics_server.query.metric_status import MetricStats, MetricStatus
from custom_metrics_server.query.routes import Host
from custom_metrics_server.sdk.backend import MetricsBackend

__all__ = ["backend_failed", "call_backend", "count_answer", "count_failure", "with_causes"]

R = TypeVar("R")

# The engine's logger: operators filter on it (the log lines are unchanged by the move).
logger = logging.getLogger("custom_metrics_server.query.engine")


def backend_failed(name: str) -> InternalError:
    """A backend's bug, masked as upstream masks a panic, naming the backend."""
    return InternalError(
        f'an error on the server ("backend {name} failed") has prevented the request from '
        "succeeding",
        details={},
    )


def _named(error: StatusError, name: str) -> StatusError:
    """`error` with `backend <name>: ` in front of its message (same class, details, headers)."""
    named = type(error)(f"backend {name}: {error.message}", details=error.details)
    named.headers.update(error.headers)
    return named


def with_causes(error: StatusError, found: list[dict[str, object]]) -> StatusError:
    """`error` with `found` appended to its `details.causes` (the message is untouched)."""
    if found:
        details = dict(error.details or {})
        details["causes"] = [*details.get("causes", ()), *found]
        error.details = details
    return error


async def call_backend(
    host: Host,
    call: Awaitable[R],
    stats: MetricStats,
    metric: str,
    *,
    deadline: float,
    observe: Callable[[str, str, float], None] | None,
    status: MetricStatus,
    answering: MetricsBackend | None = None,
) -> R:
    """Await `call`, `host`'s fetch, within `deadline` seconds, counting a failure in `stats`
    and `status` (see the module for what a failure becomes). The readiness checked is that of
    `answering`, the backend the call goes to (a composite's member: `Decision.backend`),
    else the host's."""
    backend = host.backend
    name = backend.name
    readiness = (backend if answering is None else answering).ready()
    if not readiness.ready:
        if asyncio.iscoroutine(call):
            call.close()
        unready = BackendUnavailable(
            f"the {name} backend is not ready: {readiness.reason or 'not synced'}"
        )
        count_failure(status, stats, unready, metric, timeout=False)
        raise unready
    started = time.perf_counter()
    outcome = "error"
    try:
        async with asyncio.timeout(deadline):
            result = await call
        outcome = "ok"
        return result
    except asyncio.CancelledError:
        outcome = "cancelled"  # the request's deadline (or shutdown) gave up on it
        stats.failed("cancelled (the request's deadline passed)", timeout=True)
        raise
    except TimeoutError as err:
        outcome = "timeout"
        late = BackendTimeout(f"the {name} backend did not answer within {deadline:g}s")
        count_failure(status, stats, late, metric, timeout=True)
        raise late from err
    except StatusError as err:
        named = _named(err, name)
        count_failure(status, stats, named, metric, timeout=err.code == 504)
        raise named from err
    except Exception as err:
        outcome = "bug"
        request_id = uuid.uuid4().hex
        logger.error(
            "backend %s failed (request id %s): %s: %s",
            name,
            request_id,
            type(err).__name__,
            err,
            exc_info=True,
        )
        error = backend_failed(name)
        error.headers["Audit-Id"] = request_id
        count_failure(status, stats, error, metric, timeout=False)
        raise error from err
    finally:
        if observe is not None:
            observe(name, outcome, time.perf_counter() - started)


def count_failure(
    status: MetricStatus, stats: MetricStats, error: StatusError, metric: str, *, timeout: bool
) -> None:
    """Count a failed backend call (the error path): the metric's stats, the backend's last
    failure, and, on a 5xx, when the metric last answered."""
    now = time.time()
    stats.failed(error.message, timeout=timeout, now=now)
    if error.code >= 500:
        status.backend_failed(stats.backend, error.message, metric)
        with_causes(error, causes.last_success(stats, now=now))


def count_answer(
    stats: MetricStats,
    samples: Sequence[Sample] | Sequence[ExternalSample],
    how: str,
    now: float,
    *,
    failure: StatusError | None,
) -> None:
    """Count an answer under a failure policy: as what the policy made of it. A failure it
    covered is counted as that answer, not as an error (its time and message stay the
    metric's last error)."""
    if failure is not None and samples:
        if failure.code == 504:
            stats.timeout -= 1
        else:
            stats.error -= 1
    if how == "zero":
        stats.zero += 1
        stats.last_outcome = "zero"
    elif how == "last-good":
        stats.last_good += 1
        stats.last_outcome = "last_good"
    elif samples:
        stats.found += 1
        stats.last_outcome = "found"
    else:
        stats.not_found += 1
        stats.last_outcome = "not_found"
    if samples and failure is None:
        stats.last_success = now
    if samples:
        stats.newest_age = now - max(map(TIMESTAMP, samples))
