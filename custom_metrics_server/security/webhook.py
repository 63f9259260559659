"""Calls to kube-apiserver's review endpoints (TokenReview, SubjectAccessReview) with retries.

Retry policy is upstream's `DefaultAuthWebhookRetryBackoff` with `DefaultShouldRetry`
(k8s.io/apiserver pkg/util/webhook): 500 ms initial delay, x1.5, jitter 0.2, 5 attempts, retried
only on a broken connection, 429, a 500 with reason InternalError, a timeout (504 or reason
Timeout) or a Retry-After hint. Connection refused is not retried. Each call has the client's
10 s timeout. Bodies are never logged (they carry tokens).

Must not: cache anything (the callers do), or swallow errors: every failure raises
`ReviewError`, and the callers turn it into 401 (authentication) or 500 (authorization).

Every attempt is counted and timed by upstream's metrics
(k8s.io/apiserver `authorizerfactory`/`authenticatorfactory`):
`apiserver_delegated_{authz,authn}_request_total{code}` and
`..._request_duration_seconds{code}`, `code` being the HTTP status, or `<error>` when none came
back. They tell an operator whether a slow answer waited for kube-apiserver.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from custom_metrics_server.runtime.metric_vectors import CounterVec, HistogramVec

if TYPE_CHECKING:
    from custom_metrics_server.kube.client import KubeApiError

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a URL path
SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewError(Exception):
    """A review could not be obtained (after retries)."""


class JsonPoster(Protocol):
    """What a review needs from a Kubernetes client (`KubeClient` has it)."""

    async def post_json_status(self, path: str, body: Any) -> tuple[int, Any]:
        """POST `body` as JSON, return the (2xx) status code and the decoded answer, or raise
        `KubeApiError`."""


#: Finer than upstream's (0.25 s and up): a review on a healthy control plane takes ~1 ms.
_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ReviewMetrics:
    """Upstream's count and latency of one webhook's calls, by HTTP status code."""

    def __init__(self, kind: Literal["authn", "authz"]) -> None:
        self._total = CounterVec(
            f"apiserver_delegated_{kind}_request",
            "Number of HTTP requests partitioned by status code.",
            ["code"],
        )
        self._latency = HistogramVec(
            f"apiserver_delegated_{kind}_request_duration_seconds",
            "Request latency in seconds. Broken down by status code.",
            ["code"],
            _BUCKETS,
        )

    def observe(self, code: str, seconds: float) -> None:
        """Count one call. O(log buckets)."""
        labels = (code,)
        self._total.inc(labels)
        self._latency.child(labels).observe(seconds)

    def collectors(self) -> Iterator[CounterVec | HistogramVec]:
        """What a server's registry exposes."""
        yield self._total
        yield self._latency


@dataclass(frozen=True, slots=True)
class Backoff:
    """`wait.Backoff`: the delay before attempt n+1 is duration * factor**n, jittered."""

    duration: float = 0.5
    factor: float = 1.5
    jitter: float = 0.2
    steps: int = 5


def should_retry(error: KubeApiError) -> bool:
    """`webhook.DefaultShouldRetry` on our client's errors."""
    if error.code == 0:
        # Transport failure: retry resets and timeouts, not a refused connection.
        text = error.message.lower()
        return "refused" not in text and "connecterror" not in text
    if error.code in {429, 504}:
        return True
    return error.code == 500 and error.reason in {"InternalError", "Timeout"}


async def post_review(
    client: JsonPoster,
    path: str,
    body: dict[str, Any],
    *,
    backoff: Backoff,
    metrics: ReviewMetrics | None = None,
) -> dict[str, Any]:
    """POST a review object and return the answer; raise `ReviewError` once retries are spent."""
    # kube.client is imported at the first review, not with this module: it imports kube.config
    # and so the `kubernetes` package (~20 MB), and this module is on security.gate's import
    # path (through authn and authz). Whether that package is loaded before this call depends on
    # what else the process imported.
    from custom_metrics_server.kube.client import KubeApiError  # noqa: PLC0415

    delay = backoff.duration
    for attempt in range(1, backoff.steps + 1):
        started = time.perf_counter()
        try:
            code, answer = await client.post_json_status(path, body)
        except KubeApiError as err:
            if metrics is not None:
                metrics.observe(str(err.code) if err.code else "<error>", _since(started))
            if attempt == backoff.steps or not should_retry(err):
                raise ReviewError(f"{path}: {err}") from err
        else:
            if metrics is not None:
                metrics.observe(str(code), _since(started))
            if not isinstance(answer, dict):
                raise ReviewError(f"{path}: answer is not an object")
            return answer
        await asyncio.sleep(delay * (1 + random.random() * backoff.jitter))  # noqa: S311 - jitter
        delay *= backoff.factor
    raise AssertionError("unreachable")  # pragma: no cover


def _since(started: float) -> float:
    return time.perf_counter() - started
