"""Logging set-up of every command: one line per record, klog-like verbosity.

`-v`/`--v` means what it means for Kubernetes components (docs/operations.md, "Logs"):

| `-v` | what is logged |
|---|---|
| 0-2 | INFO and above: what an operator needs (watches synced, first scrape done, backend state
  changes, reloads, certificate rotations, leader election, warnings and errors). Never a line
  per request served or per call made. |
| 3-5 | DEBUG too: per-request and per-node detail, and the traceback of a start-up failure. |
| 6+ | also one line per HTTP request the server makes (the one client, `http_client/http11.py`,
  logger `custom_metrics_server.http`: TokenReview, SubjectAccessReview, list, watch, Lease,
  node proxy, kubelets, Prometheus), as kube components log their requests from `-v=6`. |

This module also owns `Throttle`, the "once per key per interval" rule for log lines that a
request could otherwise repeat without bound. It must not log anything itself.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Hashable
from typing import Final

#: From this verbosity on, DEBUG records are logged.
DEBUG_VERBOSITY: Final = 3
#: From this verbosity on, every HTTP request the server makes is logged.
REQUEST_VERBOSITY: Final = 6


def configure_logging(verbosity: int) -> None:
    """klog-like verbosity (see the module docstring); one line per record on stderr."""
    level = logging.INFO if verbosity < DEBUG_VERBOSITY else logging.DEBUG
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        force=True,
    )
    # The HTTP client's request lines ("HTTP Request: GET ... 200 OK"), INFO records: below
    # their verbosity only its warnings get through.
    logging.getLogger("custom_metrics_server.http").setLevel(
        logging.INFO if verbosity >= REQUEST_VERBOSITY else logging.WARNING
    )


class Throttle:
    """Allows one event per key per `interval` seconds: a log line that a request can trigger
    (an unknown metric asked for again and again) is written once per key per interval.

    Keeps at most `max_keys` keys (the oldest window is forgotten first), so callers may key
    it by request input. O(1) per call, amortised.
    """

    def __init__(
        self,
        interval: float,
        *,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._last: dict[Hashable, float] = {}

    def allow(self, key: Hashable) -> bool:
        """True when `key` was not allowed within the last `interval` seconds."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return False
        self._last.pop(key, None)
        if len(self._last) >= self.max_keys:
            del self._last[next(iter(self._last))]  # insertion order: the oldest window
        self._last[key] = now
        return True
