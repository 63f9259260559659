"""Logging: klog-like `-v` levels (`runtime.logs`), the once-per-interval throttle, and the
readiness log's state changes (`server.state_log`)."""

from __future__ import annotations

import logging

import pytest

from custom_metrics_server.domain import Readiness
from custom_metrics_server.runtime.logs import Throttle, configure_logging
from custom_metrics_server.server.state_log import ReadinessLog, state_of


@pytest.mark.parametrize(
    ("verbosity", "root", "requests"),
    [
        pytest.param(0, logging.INFO, logging.WARNING, id="v0"),
        pytest.param(2, logging.INFO, logging.WARNING, id="v2"),
        pytest.param(3, logging.DEBUG, logging.WARNING, id="v3"),
        pytest.param(5, logging.DEBUG, logging.WARNING, id="v5"),
        pytest.param(6, logging.DEBUG, logging.INFO, id="v6"),
        pytest.param(8, logging.DEBUG, logging.INFO, id="v8"),
    ],
)
def test_verbosity_levels_follow_klog(verbosity: int, root: int, requests: int) -> None:
    configure_logging(verbosity)
    assert logging.getLogger().level == root
    client = logging.getLogger("custom_metrics_server.http")
    assert client.level == requests
    # The client's per request lines are INFO records: shown from -v=6 only.
    assert client.isEnabledFor(logging.INFO) == (verbosity >= 6)


def test_the_throttle_allows_once_per_key_per_interval_and_forgets_the_oldest_keys() -> None:
    now = [0.0]
    throttle = Throttle(10.0, max_keys=2, clock=lambda: now[0])
    assert throttle.allow("a")
    assert not throttle.allow("a")
    assert throttle.allow("b")
    now[0] = 9.9
    assert not throttle.allow("a")
    now[0] = 10.0
    assert throttle.allow("a")
    assert throttle.allow("c")  # a third key pushes out the oldest window ("b")
    assert throttle.allow("b")


def test_the_state_of_a_check() -> None:
    assert state_of(Readiness(True)) == "ready"
    assert state_of(Readiness(True, "serving the last good listing")) == "degraded"
    assert state_of(Readiness(False, "waiting")) == "not ready"


def test_state_changes_are_info_and_reason_changes_within_a_state_are_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checks = {"ping": Readiness(True), "backend-x": Readiness(False, "waiting for the list")}
    log = ReadinessLog(lambda: checks)
    with caplog.at_level(logging.DEBUG, logger="custom_metrics_server.readiness"):
        log.observe()  # first look: only what is not plainly ready
        checks["backend-x"] = Readiness(False, "waiting for the list (last error: refused)")
        log.observe()
        checks["backend-x"] = Readiness(True, "usage not available yet")
        log.observe()
        log.observe()  # nothing changed: nothing logged
        checks["backend-x"] = Readiness(True)
        log.observe()
        checks["backend-x"] = Readiness(False, "shutting down")
        log.observe()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("INFO", "backend-x: not ready (waiting for the list)"),
        ("DEBUG", "backend-x: still not ready (waiting for the list (last error: refused))"),
        ("INFO", "backend-x: not ready -> degraded (usage not available yet)"),
        ("INFO", "backend-x: degraded -> ready"),
        ("INFO", "backend-x: ready -> not ready (shutting down)"),
    ]
