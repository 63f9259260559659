"""The readiness log: one INFO line whenever a `/readyz` check changes state.

A check is in one of three states: **ready**, **degraded** (ready, with a note: a backend
serving its last good data, usage not available yet) or **not ready**. Every change between
them is logged at INFO with the check's reason, which is what an operator needs to follow a
backend through start-up, outages and recovery without reading `/readyz?verbose` in a loop; a
change of reason within one state (an error message that changes between retries) is logged
at DEBUG only, so a failing dependency cannot flood the log.

The checks are polled (`interval`, 1 s): backends expose readiness as a cheap on-demand value,
not as events. Cost: one `checks()` call per interval, O(checks). It must not change
readiness or serve anything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Final, Literal

from custom_metrics_server.domain import Readiness

__all__ = ["ReadinessLog", "state_of"]

logger = logging.getLogger("custom_metrics_server.readiness")

State = Literal["ready", "degraded", "not ready"]

#: How often the checks are looked at, in seconds.
INTERVAL: Final = 1.0


def state_of(check: Readiness) -> State:
    """The state a check's readiness stands for."""
    if not check.ready:
        return "not ready"
    return "degraded" if check.reason else "ready"


class ReadinessLog:
    """Logs the changes of `checks()` (the `/readyz` checks by name); see the module doc."""

    def __init__(
        self, checks: Callable[[], Mapping[str, Readiness]], *, interval: float = INTERVAL
    ) -> None:
        self._checks = checks
        self._interval = interval
        self._last: dict[str, Readiness] = {}

    def observe(self) -> None:
        """Compare the checks with the last look and log what changed. O(checks)."""
        current = dict(self._checks())
        for name, check in current.items():
            before = self._last.get(name)
            state = state_of(check)
            if before is None:
                if state != "ready" or check.reason:
                    logger.info("%s: %s%s", name, state, _because(check))
                continue
            if state != state_of(before):
                logger.info("%s: %s -> %s%s", name, state_of(before), state, _because(check))
            elif check.reason != before.reason:
                logger.debug("%s: still %s%s", name, state, _because(check))
        self._last = current

    async def run(self) -> None:
        """Observe every `interval` seconds until cancelled; a failing check is logged, not
        raised (the log must not stop the server)."""
        while True:
            try:
                self.observe()
            except Exception:  # a check's bug must not end the lifespan
                logger.exception("reading the readiness checks failed")
            await asyncio.sleep(self._interval)


def _because(check: Readiness) -> str:
    return f" ({check.reason})" if check.reason else ""
