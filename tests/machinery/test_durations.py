"""Go and Prometheus durations (machinery.durations)."""

from __future__ import annotations

import pytest

from custom_metrics_server.machinery.durations import (
    format_go_duration,
    go_duration_seconds,
    parse_go_duration_ns,
    parse_prometheus_duration,
)


def test_go_durations_convert_to_seconds() -> None:
    assert go_duration_seconds("1m30s") == 90.0
    assert go_duration_seconds("250ms") == 0.25
    assert go_duration_seconds("1h") == 3600.0
    assert go_duration_seconds("1.5s") == 1.5
    assert go_duration_seconds("-2s") == -2.0
    assert go_duration_seconds("0") == 0.0
    assert go_duration_seconds("10us") == pytest.approx(1e-5)
    for text in ("", "10", "abc", "1x", "s", "1m 30s", "0s1"):
        assert go_duration_seconds(text) is None, text


@pytest.mark.parametrize(
    ("text", "nanos"),
    [("1h2m3.004s", 3_723_004_000_000), ("+1.5\u03bcs", 1_500), (".5s", 500_000_000), ("-0", 0)],
)
def test_go_durations_are_exact_nanoseconds(text: str, nanos: int) -> None:
    assert parse_go_duration_ns(text) == nanos


@pytest.mark.parametrize("text", ["", "+", "-", "1", "1.s.", ".s", "1d"])
def test_bad_go_durations_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="not a Go duration"):
        parse_go_duration_ns(text)


def test_prometheus_durations() -> None:
    assert parse_prometheus_duration("1h30m") == 5400
    assert parse_prometheus_duration("500ms") == 0.5
    assert parse_prometheus_duration(" 2d ") == 172800
    assert parse_prometheus_duration("1y1w") == 31536000 + 604800
    for text in ("5 minutes", "", "1.5s", "5", "1us"):
        with pytest.raises(ValueError, match="not a Prometheus duration"):
            parse_prometheus_duration(text)


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (7, "7ns"),
        (1_500, "1.5\u00b5s"),
        (1_500_000, "1.5ms"),
        (15_000_000_000, "15s"),
        (20_038_000_000, "20.038s"),
        (60_000_000_000, "1m0s"),
        (3_723_500_000_000, "1h2m3.5s"),
        (-2_000_000_000, "-2s"),
    ],
)
def test_windows_are_go_durations(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text
