"""Tests for custom_metrics_server.scraping.core: the scraping core both scrapers run on, with
parts of its own (targets in a list, bodies from a dict): one target's scrape (the deadline,
expected failures by reason, a bug counted as `internal` and logged with its traceback, a
target that left skipped, the stats snapshot), and the core's rounds (the first round scrapes every listed target
and prunes with the listed set; a catch-up scrapes only new targets and failing targets urged
by `notice`, whatever their backoff)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from custom_metrics_server.scraping.core import ScrapeCore, ScrapeParts, ScrapeWords
from custom_metrics_server.scraping.failure import ScrapeFailure

LOGGER = "tests.scraping.core"


class World:
    """Targets by name; each answers its body, or raises what it is given, or hangs."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.answers: dict[str, bytes | BaseException | None] = {}
        self.fetched: list[str] = []
        self.taken: dict[str, bytes] = {}
        self.pruned: list[set[str]] = []

    def parts(self) -> ScrapeParts[str]:
        return ScrapeParts(
            listing=lambda: sorted(self.listed),
            prune=self.pruned.append,
            find=lambda name: name if name in self.listed else None,
            fetch=self.fetch,
            take=self.take,
        )

    async def fetch(self, name: str, seconds: float) -> bytes:
        self.fetched.append(name)
        answer = self.answers.get(name, b"ok")
        if answer is None:
            await asyncio.sleep(3600)
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, bytes)
        return answer

    def take(self, name: str, target: str, body: bytes, now: float) -> None:
        if body == b"bug":
            raise KeyError("a bug")
        if body == b"unreadable":
            raise ScrapeFailure("parse", "unreadable metrics")
        self.taken[name] = body


def core_of(world: World, *, interval: float = 60.0, timeout: float = 5.0) -> ScrapeCore[str]:
    return ScrapeCore(
        world.parts(),
        words=ScrapeWords(
            target="endpoint", what="test", noun="thing", listing="thing list", advice="relax"
        ),
        interval=interval,
        timeout=timeout,
        concurrency=4,
        age_out_intervals=3,
        clock=time.time,
        logger=logging.getLogger(LOGGER),
    )


async def wait_for(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Poll until ``condition`` holds (fails the test after ``within`` seconds: a margin no
    load reaches, as nothing here waits for a round's tick)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_one_scrape_classifies_each_outcome_and_books_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    world.listed = ["good", "refused", "unreadable", "buggy", "hangs"]
    world.answers = {
        "refused": ScrapeFailure("http_503", "busy"),
        "unreadable": b"unreadable",
        "buggy": b"bug",
        "hangs": None,
    }
    core = core_of(world)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        outcomes = {name: await core.scrape(name, 0.05) for name in world.listed}
    assert outcomes == {
        "good": True,
        "refused": False,
        "unreadable": False,
        "buggy": False,
        "hangs": False,
    }
    assert world.taken == {"good": b"ok"}
    assert {name: reason for name, (reason, _) in core.book.failing().items()} == {
        "refused": "http_503",
        "unreadable": "parse",
        "buggy": "internal",
        "hangs": "timeout",
    }
    assert dict(core.book.failures) == {"http_503": 1, "parse": 1, "internal": 1, "timeout": 1}
    assert core.scrapes == 5
    assert core.last_scrape_seconds is not None
    # The snapshot both scrapers' self-metrics read: the same counts as the book's and the
    # core's, one failure each time so far (none backing off), nothing listed by a round yet.
    stats = core.stats(expired=2)
    assert stats.failures_by_reason == dict(core.book.failures)
    assert (stats.scrapes, stats.failures, stats.targets_failing) == (5, 4, 4)
    assert (stats.targets_backing_off, stats.expired, stats.targets) == (0, 2, 0)
    assert stats.last_scrape_seconds == core.last_scrape_seconds
    bug = [record for record in caplog.records if "failed unexpectedly" in record.getMessage()]
    assert [record.getMessage() for record in bug] == ["scraping thing buggy failed unexpectedly"]
    assert bug[0].exc_info is not None  # the traceback of a bug is kept
    assert "scraping the endpoint of thing hangs failed (timeout): no answer within 0.05s" in (
        caplog.text
    )


async def test_a_target_that_left_is_skipped_uncounted() -> None:
    world = World()
    core = core_of(world)
    assert await core.scrape("gone") is True
    assert (core.scrapes, world.fetched, core.book.failing()) == (0, [], {})


async def test_rounds_scrape_the_listed_then_catch_up_new_and_urged_targets_only() -> None:
    world = World()
    world.listed = ["a", "b"]
    world.answers = {"b": ScrapeFailure("unreachable", "no route")}
    core = core_of(world)  # a 60 s interval: after the first round, only catch-ups run
    core.start("test-rounds")
    try:
        await wait_for(lambda: core.rounds.first_round is not None)
        assert core.rounds.first_round == (1, 2)
        assert sorted(world.fetched) == ["a", "b"]
        assert world.pruned == [{"a", "b"}]
        assert core.listed == 2
        world.fetched.clear()
        world.listed.append("c")
        core.notice()
        await wait_for(lambda: "c" in world.taken)
        assert world.fetched == ["c"]  # "b" is backing off; "a" waits for its round
        world.fetched.clear()
        world.answers.clear()
        core.notice(["a", "b"])  # "b" became reachable; "a" is not failing: no hurry
        await wait_for(lambda: "b" in world.taken)
        assert world.fetched == ["b"]
        assert core.book.failing() == {}
        assert core.listed == 3
    finally:
        await core.stop()
