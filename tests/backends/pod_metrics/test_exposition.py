"""The pod-metrics exposition reader (`backends/pod_metrics/exposition.py`): it reads what
`prometheus_client`'s text parser reads, on realistic bodies and on generated ones, keeps only
the selected series, types them from `# TYPE`, and refuses a broken selected line."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from custom_metrics_server.backends.pod_metrics.config import MetricRule, MetricSelection
from custom_metrics_server.backends.pod_metrics.exposition import (
    ExpositionError,
    Kept,
    read_exposition,
)
from custom_metrics_server.machinery.label_parser import parse_selector
from tests.fakes.pod_exposition import go_app_body

EVERY = MetricSelection([MetricRule("*")])


def select(*names: str, labels: str = "") -> MetricSelection:
    return MetricSelection([MetricRule(name, parse_selector(labels)) for name in names])


def theirs(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """prometheus_client's reading of every sample, keyed as ours."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def ours(text: str, selection: MetricSelection = EVERY) -> dict[tuple[str, tuple], float]:
    return {(k.name, k.labels): k.value for k in read_exposition(text, selection).samples}


@pytest.mark.parametrize("pod", [0, 3, 17])
def test_a_go_service_body_reads_as_prometheus_client_reads_it(pod: int) -> None:
    text = go_app_body(pod, scrape=4, series=200).decode()
    expected = theirs(text)
    found = ours(text)
    # What we skip on purpose: summary quantiles and histogram buckets.
    skipped = {
        key for key in expected if key[0] == "go_gc_duration_seconds" or key[0].endswith("_bucket")
    }
    assert found == {key: value for key, value in expected.items() if key not in skipped}
    assert len(found) > 50


def test_counters_histogram_and_summary_sums_and_counts_are_counters_others_gauges() -> None:
    text = go_app_body(1, scrape=2, series=120).decode()
    kinds = {k.name: k.counter for k in read_exposition(text, EVERY).samples}
    assert kinds["http_requests_total"] is True
    assert kinds["process_cpu_seconds_total"] is True
    assert kinds["go_gc_duration_seconds_sum"] is True  # summary
    assert kinds["go_gc_duration_seconds_count"] is True
    assert kinds["http_request_duration_seconds_count"] is True  # histogram
    assert kinds["go_goroutines"] is False
    assert kinds["app_cache_entries"] is False  # no TYPE line: untyped, a gauge
    assert "go_gc_duration_seconds" not in kinds  # quantiles skipped
    assert "http_request_duration_seconds_bucket" not in kinds


def test_only_selected_series_are_kept_and_label_filters_apply() -> None:
    text = go_app_body(2, scrape=3, series=200).decode()
    kept = read_exposition(text, select("http_requests_total", labels="code=200")).samples
    assert {k.name for k in kept} == {"http_requests_total"}
    assert len(kept) == 12  # 6 handlers x 2 methods with code 200
    assert all(dict(k.labels)["code"] == "200" for k in kept)
    globbed = read_exposition(text, select("go_memstats_*_bytes")).samples
    assert globbed
    assert {k.name for k in globbed} <= {
        line.split()[0] for line in text.splitlines() if line.startswith("go_memstats_")
    }
    assert all(k.name.endswith("_bytes") for k in globbed)
    # A name that is a prefix of another is not the other.
    assert read_exposition("queue_depth_max 3\nqueue_depth 2\n", select("queue_depth")).samples == [
        Kept("queue_depth", (), 2.0, None, False)
    ]


def test_escapes_spaces_timestamps_and_special_values() -> None:
    text = (
        "# HELP odd A metric with odd labels\n"
        "# TYPE odd gauge\n"
        'odd{path="/a\\"b\\\\c\\nd",empty="",brace="}{",comma=",x"} 1.5e3 1700000000123\n'
        '  odd { spaced = "yes" , trailing="comma", } -Inf\n'
        'odd{v="nan"} NaN\n'
        "odd\t+Inf\t1700000000000\r\n"
        'odd{z="1",a="2"} 0x10\n'
    )
    with pytest.raises(ExpositionError, match="line 7: invalid value '0x10'"):
        read_exposition(text, select("odd"))
    text = text.replace("0x10", "16")
    found = {k.labels: k for k in read_exposition(text, select("odd")).samples}
    escaped = found[(("brace", "}{"), ("comma", ",x"), ("empty", ""), ("path", '/a"b\\c\nd'))]
    assert escaped.value == 1500.0
    assert escaped.timestamp == 1_700_000_000.123
    assert found[(("spaced", "yes"), ("trailing", "comma"))].value == -math.inf
    assert math.isnan(found[(("v", "nan"),)].value)
    assert found[()].value == math.inf
    assert found[()].timestamp == 1_700_000_000.0
    assert found[(("a", "2"), ("z", "1"))].value == 16.0  # labels sorted
    # prometheus_client agrees on every value (NaN aside).
    expected = theirs(text)
    for key, value in ours(text, select("odd")).items():
        assert value == expected[key] or (math.isnan(value) and math.isnan(expected[key]))


def test_openmetrics_text_counters_created_exemplars_and_eof() -> None:
    text = (
        "# TYPE requests counter\n"
        'requests_total{code="200"} 10 # {trace_id="abc"} 1.0 1700000000.0\n'
        'requests_created{code="200"} 1700000000\n'
        "# TYPE latency histogram\n"
        'latency_bucket{le="+Inf"} 4\n'
        "latency_sum 2.5\n"
        "latency_count 4\n"
        "# EOF\n"
    )
    kept = read_exposition(text, EVERY).samples
    assert kept == [
        Kept("requests_total", (("code", "200"),), 10.0, None, True),
        Kept("latency_sum", (), 2.5, None, True),
        Kept("latency_count", (), 4.0, None, True),
    ]


def test_quoted_utf8_names() -> None:
    text = '# TYPE "my.metric" counter\n{"my.metric", code="200"} 7\n{"other.metric"} 1\n'
    assert read_exposition(text, select("*")).samples == [
        Kept("my.metric", (("code", "200"),), 7.0, None, True),
        Kept("other.metric", (), 1.0, None, False),
    ]
    kept = read_exposition(text, MetricSelection([MetricRule("my.metric")])).samples
    assert kept == [Kept("my.metric", (("code", "200"),), 7.0, None, True)]


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('queue{a="1" b="2"} 1', "invalid labels"),
        ('queue{a="1",a="2"} 1', "label 'a' is repeated"),
        ('queue{a="1"', "invalid value"),
        ("queue", "not a sample line"),
        ("queue 1_000", "invalid value"),
        ("queue 1 12.5.3", "invalid timestamp"),
        ("queue 1 2 3", "not a sample line"),
        ("queue{a=1} 1", "invalid labels"),
    ],
)
def test_a_broken_selected_line_is_an_error_naming_the_line(line: str, error: str) -> None:
    text = f"# TYPE queue gauge\nother 1\n{line}\n"
    with pytest.raises(ExpositionError, match=f"line 3: .*{error}|line 3: {error}"):
        read_exposition(text, select("queue"))
    # The same line is never read when the metric is not selected.
    assert read_exposition(text, select("other")).samples == [Kept("other", (), 1.0, None, False)]


def test_the_limit_bounds_what_is_kept_and_counts_the_rest() -> None:
    text = "".join(f'queue{{shard="{i}"}} {i}\n' for i in range(50))
    reading = read_exposition(text, select("queue"), limit=20)
    assert len(reading.samples) == 20
    assert reading.overflow == 30


def test_label_blocks_are_remembered_per_selection_and_bounded() -> None:
    selection = select("queue", labels="shard!=1")
    text = 'queue{shard="0"} 1\nqueue{shard="1"} 2\n'
    assert [k.value for k in read_exposition(text, selection).samples] == [1.0]
    assert selection.blocks == {
        ("queue", 'shard="0"'): (("shard", "0"),),
        ("queue", 'shard="1"'): None,  # filtered out, remembered as such
    }
    # Read again from memory: the same answer, the values of this body.
    assert [k.value for k in read_exposition(text.replace("} 1", "} 5"), selection).samples] == [
        5.0
    ]


label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: not name.startswith("__")
)
label_values = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
values = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=True, width=64),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a_metric", "b_total", "c:rule"]),
            st.dictionaries(label_names, label_values, max_size=4),
            values,
            st.one_of(st.none(), st.integers(min_value=0, max_value=2**41)),
        ),
        max_size=12,
    )
)
def test_generated_bodies_read_as_prometheus_client_reads_them(
    samples: list[tuple[str, dict[str, str], float, int | None]],
) -> None:
    lines = ["# TYPE b_total counter"]
    for name, labels, value, stamp in samples:
        block = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        rendered = repr(float(value)) if isinstance(value, float) else str(value)
        rendered = {"inf": "+Inf", "-inf": "-Inf"}.get(rendered, rendered)
        lines.append(f"{name}{{{block}}} {rendered}" + (f" {stamp}" if stamp is not None else ""))
    text = "\n".join(lines) + "\n"
    expected: dict[tuple[str, tuple], tuple[float, float | None]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            expected[(sample.name, tuple(sorted(sample.labels.items())))] = (
                sample.value,
                sample.timestamp,
            )
    found = {
        (k.name, k.labels): (k.value, k.timestamp) for k in read_exposition(text, EVERY).samples
    }
    assert found.keys() == expected.keys()
    for key, (value, stamp) in found.items():
        their_value, their_stamp = expected[key]
        assert value == float(their_value)
        assert (stamp is None) == (their_stamp is None)
        if stamp is not None:
            assert stamp == pytest.approx(float(their_stamp))


def test_kinds_follow_each_bodys_type_lines_when_one_selection_reads_many_bodies() -> None:
    # One selection reads the bodies of every pod of a scrape config; the kinds it remembers
    # are per set of TYPE lines, so pods of two exporter versions are each read by their own.
    selection = select("jobs", "jobs_total", "latency_sum", "latency_bucket")
    counter = "# TYPE jobs counter\njobs 5\n"
    gauge = "# TYPE jobs gauge\njobs 5\n"
    summary = '# TYPE latency summary\nlatency_sum 2\nlatency{quantile="0.5"} 1\n'
    histogram = '# TYPE latency histogram\nlatency_sum 2\nlatency_bucket{le="+Inf"} 1\n'
    for _ in range(2):
        assert [k.counter for k in read_exposition(counter, selection).samples] == [True]
        assert [k.counter for k in read_exposition(gauge, selection).samples] == [False]
        assert [k.counter for k in read_exposition("jobs 5\n", selection).samples] == [False]
        assert [(k.name, k.counter) for k in read_exposition(summary, selection).samples] == [
            ("latency_sum", True)
        ]
        assert [(k.name, k.counter) for k in read_exposition(histogram, selection).samples] == [
            ("latency_sum", True)
        ]
    assert len(selection.kinds) == 5


def test_memoised_choices_equal_a_fresh_selection_s() -> None:
    """`MetricSelection.choice` memoises per name (bounded): through names asked in any
    order and again, each answer is a fresh selection's (exact names before globs, the first
    rule deciding)."""
    rules = [
        MetricRule("http_requests_total", parse_selector("code=200")),
        MetricRule("http_*"),
        MetricRule("*_seconds", parse_selector("le!=10")),
        MetricRule("queue_?"),
        MetricRule("http_requests_total"),
    ]
    memoised = MetricSelection(rules)
    rng = random.Random(5)
    names = ["http_requests_total", "http_x", "a_seconds", "queue_1", "queue_12", "other", ""]
    for _ in range(200):
        name = rng.choice(names) + rng.choice(["", "", "_seconds", "x"])
        assert memoised.choice(name) == MetricSelection(rules).choice(name), name
