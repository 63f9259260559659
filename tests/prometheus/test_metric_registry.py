"""Series listings to metrics: association rules and the memory bound."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource, MetricInfo
from custom_metrics_server.prometheus.answers import PrometheusError, SeriesReader
from custom_metrics_server.prometheus.metric_registry import SeriesShape, build, series_shape
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ServerConfig
from custom_metrics_server.prometheus.rules_config import parse_config

DEFAULT = ServerConfig(name=DEFAULT_SERVER, url="http://p:9090")
CONFIG = parse_config(
    """
rules:
- seriesQuery: '{__name__=~".+"}'
  resources:
    template: "<<.Resource>>"
    overrides: {kube_deployment: {group: apps, resource: deployment}}
externalRules:
- seriesQuery: '{__name__=~".+"}'
  name: {matches: "^queue_(.*)$", as: "q_$1"}
""",
    default_server=DEFAULT,
)
QUERY = (DEFAULT_SERVER, '{__name__=~".+"}')


def shapes(series: Iterable[dict[str, str]]) -> set[SeriesShape]:
    """The whole-document reduction the streamed reader must equal."""
    return {shape for labels in series if (shape := series_shape(labels)) is not None}


async def registry_for(series: list[dict[str, str]]):  # type: ignore[no-untyped-def]
    cluster = InMemoryCluster()

    async def resolve(text: str):  # type: ignore[no-untyped-def]
        return cluster.mapping(text)

    return await build(CONFIG, {QUERY: sorted(shapes(series))}, resolve)


async def test_association_follows_upstream() -> None:
    registry = await registry_for(
        [
            {"__name__": "http_total", "namespace": "a", "pod": "p", "service": "s"},
            {"__name__": "load", "node": "n"},
            {"__name__": "orphans", "pod": "p"},  # a pod series without a namespace label
            {"__name__": "replicas", "namespace": "a", "kube_deployment": "d"},
            {"__name__": "queue_len", "instance": "x"},
            {"__name__": "unrelated", "instance": "x"},
        ]
    )
    custom = set(registry.custom)
    assert MetricInfo(GroupResource("", "pods"), True, "http_total") in custom
    assert MetricInfo(GroupResource("", "services"), True, "http_total") in custom
    assert MetricInfo(GroupResource("", "namespaces"), False, "http_total") in custom
    assert MetricInfo(GroupResource("", "nodes"), False, "load") in custom
    assert MetricInfo(GroupResource("apps", "deployments"), True, "replicas") in custom
    assert not any(info.metric in ("orphans", "unrelated", "queue_len") for info in custom)
    assert set(registry.external) == {"q_len"}
    assert registry.external["q_len"].series == "queue_len"


# --- the streamed series listing -------------------------------------------------------------

LABEL_VALUE = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ['"', "\\", "{", "}", '\\"', "},{", '"}', "\\\\", "\u2028"]
)
SERIES = st.lists(
    st.dictionaries(
        st.sampled_from(["__name__", "pod", "namespace", "le", "path", "x"]),
        LABEL_VALUE,
        max_size=5,
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    series=SERIES,
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
    indent=st.booleans(),
)
def test_the_streamed_listing_reduces_like_the_whole_document(
    series: list[dict[str, str]], cuts: list[int], indent: bool
) -> None:
    # Prometheus writes compact JSON; a proxy or another engine may indent it.
    body = orjson.dumps(
        {"status": "success", "data": series}, option=orjson.OPT_INDENT_2 if indent else 0
    )
    reader = SeriesReader()
    previous = 0
    for cut in sorted({min(c, len(body)) for c in cuts}):
        reader.feed(body[previous:cut])
        previous = cut
    reader.feed(body[previous:])
    expected = shapes(s for s in series if isinstance(s.get("__name__"), str))
    assert reader.finish("test") == expected


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"status":"success","data":[{"__name__":"a"',  # cut short
        b'{"status":"error","data":[]}',
        b"",
    ],
)
def test_a_broken_listing_is_unavailable_not_empty(body: bytes) -> None:
    reader = SeriesReader()
    reader.feed(body)
    with pytest.raises(PrometheusError) as caught:
        reader.finish("Prometheus server 'default'")
    assert caught.value.kind == "unavailable"


def test_streaming_memory_is_one_series_not_the_listing() -> None:
    series = [
        {"__name__": f"m{i % 3}", "namespace": f"ns{i % 50}", "pod": f"pod-{i}", "container": "c"}
        for i in range(50_000)
    ]
    body = orjson.dumps({"status": "success", "data": series})
    del series
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    tracemalloc.start()
    reader = SeriesReader()
    for chunk in chunks:
        reader.feed(chunk)
    shapes = reader.finish("test")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(shapes) == 3
    assert peak < 512 * 1024  # the 4.5 MB body arrives in 64 KiB chunks; no object list
