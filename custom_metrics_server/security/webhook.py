"""Calls to kube-apiserver's review endpoints (TokenReview, SubjectAccessReview) with retries.

Retry policy is upstream's `DefaultAuthWebhookRetryBackoff` with `DefaultShouldRetry`
(k8s.io/apiserver pkg/util/webhook): 500 ms initial delay, x1.5, jitter 0.2, 5 attempts, retried
only on a broken connection, 429, a 500 with reason InternalError, a timeout (504 or reason
Timeout) or a Retry-After hint. Connection refused is not retried. Each call has the client's
10 s timeout. Bodies are never logged (they carry tokens).

Must not: cache anything (the callers do), or swallow errors: every failure raises
`ReviewError`, and the callers turn it into 401 (authentication) or 500 (authorization).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from custom_metrics_server.kube.client import KubeApiError

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"  # noqa: S105 - a URL path
SUBJECT_ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewError(Exception):
    """A review could not be obtained (after retries)."""


class JsonPoster(Protocol):
    """What a review needs from a Kubernetes client (`KubeClient` satisfies it)."""

    async def post_json(self, path: str, body: Any) -> Any:
        """POST `body` as JSON, return the decoded answer or raise `KubeApiError`."""


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
    client: JsonPoster, path: str, body: dict[str, Any], *, backoff: Backoff
) -> dict[str, Any]:
    """POST a review object and return the answer; raise `ReviewError` once retries are spent."""
    # kube.client is imported at the first review, not with this module: it imports kube.config
    # and so the `kubernetes` package (~20 MB), and this module is on security.gate's import
    # path (through authn and authz). Whether that package is loaded before this call depends on
    # what else the process imported.
    from custom_metrics_server.kube.client import KubeApiError  # noqa: PLC0415

    delay = backoff.duration
    for attempt in range(1, backoff.steps + 1):
        try:
            answer = await client.post_json(path, body)
        except KubeApiError as err:
            if attempt == backoff.steps or not should_retry(err):
                raise ReviewError(f"{path}: {err}") from err
        else:
            if not isinstance(answer, dict):
                raise ReviewError(f"{path}: answer is not an object")
            return answer
        await asyncio.sleep(delay * (1 + random.random() * backoff.jitter))  # noqa: S311 - jitter
        delay *= backoff.factor
    raise AssertionError("unreachable")  # pragma: no cover
