"""Why one read of resource usage failed, for both readers: the kubelet scraper and the node
agent's CRI client.

Owns :class:`ScrapeFailure` only: a short ``reason`` label that self-metrics count by
(``timeout``, ``unavailable``, ``http_503``, ``parse`` ...) and a one-line ``message`` for the
log. Readers raise it for every expected failure; anything else is a bug. It must not log or
retry (its callers decide).
"""

from __future__ import annotations

__all__ = ["ScrapeFailure"]


class ScrapeFailure(Exception):
    """A read of usage failed; ``reason`` is a short label for counting."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
