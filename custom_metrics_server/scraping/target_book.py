"""The scraping core's book of targets (nodes, or pods): which are failing, when each is due
again, and the log lines a change of state deserves.

This module owns :class:`TargetBook`: per target (a node, or a pod) the consecutive failures,
the last reason and the round of the last attempt; the backoff rule (a target that failed *k*
times in a row is tried again after ``2**(k-1)`` rounds, at most every
:data:`MAX_BACKOFF_ROUNDS`); failures counted by reason; and logging that stays readable with
thousands of targets (a line when a target starts failing and when it answers again, for the
first few per round; one summary line per round for the rest). It must not do I/O or decide
when rounds run (that is :mod:`.rounds`).

Its records go to the logger it is given by the core (:mod:`.core`), the scraper's own
(``custom_metrics_server.scraping.kubelet_scraper`` by default): one logger for everything a
scraper says, as operators filter by it. The pod scraper's book speaks of pods
(``noun="pod"``).

Cost: O(1) per target per event; :meth:`TargetBook.forget` and the counts are O(targets).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Final

from custom_metrics_server.scraping.failure import ScrapeFailure

__all__ = ["MAX_BACKOFF_ROUNDS", "TargetBook", "sample_names"]

logger = logging.getLogger("custom_metrics_server.scraping.kubelet_scraper")

#: A target failing again and again is tried at least this often (in rounds).
MAX_BACKOFF_ROUNDS: Final = 8
#: Per round, this many targets that start failing (or answer again) get their own log line;
#: the rest are summed up in one line at the end of the round.
_LOG_TARGETS: Final = 5


@dataclass(slots=True)
class _TargetStatus:
    failing: bool = False
    consecutive_failures: int = 0
    last_reason: str = ""
    #: the round of the last attempt (-1: never attempted)
    last_round: int = -1


@dataclass
class _RoundLog:
    """Targets that changed state in the current round, for one summary line."""

    new_failures: Counter[str] = field(default_factory=Counter)
    new_failing: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)


class TargetBook:
    """Scrape state per named target (a node, a pod); ``target``, ``interval``,
    ``age_out_intervals``, ``noun`` (what a name is: "node"), ``dropped`` (what happens to a
    silent target's values) and ``logger`` only shape the log lines."""

    def __init__(
        self,
        *,
        target: str,
        interval: float,
        age_out_intervals: int,
        noun: str = "node",
        dropped: str | None = None,
        logger: logging.Logger = logger,
    ) -> None:
        self.target = target
        self.interval = interval
        self.age_out_intervals = age_out_intervals
        self.noun = noun
        self.dropped = dropped or (
            f"its usage is dropped after {age_out_intervals} intervals without an answer"
        )
        self.logger = logger
        #: failed scrapes by reason, since start
        self.failures: Counter[str] = Counter()
        self._status: dict[str, _TargetStatus] = {}
        self._round_log = _RoundLog()

    def forget(self, listed: Collection[str]) -> None:
        """Drop the targets that are no longer listed. O(targets)."""
        for gone in [name for name in self._status if name not in listed]:
            del self._status[gone]

    def due(self, names: Sequence[str], number: int) -> list[str]:
        """The targets of ``names`` due in round ``number`` (backoff after consecutive failures),
        least recently attempted first. O(n log n)."""
        status = self._status
        found = [name for name in names if self._due(status.get(name), number)]
        found.sort(key=lambda name: status[name].last_round if name in status else -1)
        return found

    @staticmethod
    def _due(status: _TargetStatus | None, number: int) -> bool:
        if status is None or status.consecutive_failures == 0:
            return True
        wait = min(1 << (status.consecutive_failures - 1), MAX_BACKOFF_ROUNDS)
        return number - status.last_round >= wait

    def known(self, name: str) -> bool:
        """Whether ``name`` was ever attempted (and is still listed). O(1)."""
        return name in self._status

    def is_failing(self, name: str) -> bool:
        """Whether the last scrape of ``name`` failed."""
        status = self._status.get(name)
        return status is not None and status.consecutive_failures > 0

    def attempted(self, name: str, number: int) -> None:
        """Record that ``name`` is scraped in round ``number``."""
        self._status.setdefault(name, _TargetStatus()).last_round = number

    def failed(self, name: str, failure: ScrapeFailure) -> None:
        """Count a failed scrape; log it when the target starts failing."""
        self.failures[failure.reason] += 1
        status = self._status.setdefault(name, _TargetStatus())
        status.consecutive_failures += 1
        status.last_reason = failure.reason
        if status.failing:
            self.logger.debug(
                "%s %s still failing (%s): %s", self.noun, name, failure.reason, failure.message
            )
            return
        status.failing = True
        log = self._round_log
        log.new_failures[failure.reason] += 1
        log.new_failing.append(name)
        level = logging.WARNING if len(log.new_failing) <= _LOG_TARGETS else logging.DEBUG
        self.logger.log(
            level,
            "scraping the %s of %s %s failed (%s): %s; retrying with backoff (at most every "
            "%d rounds of %gs), %s",
            self.target,
            self.noun,
            name,
            failure.reason,
            failure.message,
            MAX_BACKOFF_ROUNDS,
            self.interval,
            self.dropped,
        )

    def succeeded(self, name: str) -> None:
        """Record an answer; log it when the target was failing."""
        status = self._status.setdefault(name, _TargetStatus())
        if status.failing:
            recovered = self._round_log.recovered
            recovered.append(name)
            self.logger.log(
                logging.INFO if len(recovered) <= _LOG_TARGETS else logging.DEBUG,
                "the %s of %s %s answers again after %d failed scrape(s)",
                self.target,
                self.noun,
                name,
                status.consecutive_failures,
            )
        status.failing = False
        status.consecutive_failures = 0
        status.last_reason = ""

    def start_round(self) -> None:
        """Begin collecting the state changes of a new round."""
        self._round_log = _RoundLog()

    def summarise_round(self, number: int, listed: int, *, answered: int, scraped: int) -> None:
        """One line for what the per-target lines left out (many targets changing at once)."""
        log = self._round_log
        new = len(log.new_failing)
        if new > _LOG_TARGETS:
            reasons = ", ".join(f"{reason} {count}" for reason, count in log.new_failures.items())
            self.logger.warning(
                "%s scrape round %d: %d of %d listed %s(s) started failing (%s): %s; "
                "%d of %d scraped answered; failing %ss are retried with backoff (at most "
                "every %d rounds)",
                self.target,
                number,
                new,
                listed,
                self.noun,
                reasons,
                sample_names(log.new_failing),
                answered,
                scraped,
                self.noun,
                MAX_BACKOFF_ROUNDS,
            )
        if len(log.recovered) > _LOG_TARGETS:
            self.logger.info(
                "%s scrape round %d: %d %s(s) answer again: %s",
                self.target,
                number,
                len(log.recovered),
                self.noun,
                sample_names(log.recovered),
            )

    def failing(self) -> dict[str, tuple[str, int]]:
        """Targets whose last scrape failed: the reason and how many times in a row (twice or
        more: backing off). O(targets)."""
        return {
            name: (status.last_reason, status.consecutive_failures)
            for name, status in self._status.items()
            if status.failing
        }


def sample_names(names: Sequence[str], limit: int = 10) -> str:
    """The first few names, for a log line that must stay one line."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
