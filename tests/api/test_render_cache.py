"""The render caches (api.render_cache) against the uncached encoders: through random
sequences of answers, every body the encoders build from cached fragments, aligned lists and
remembered bodies is byte for byte the body built from single-use copies of the same samples
(`reused=False`, which no cache ever sees)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.api import protobuf, render_cache, wire
from custom_metrics_server.domain import ExternalSample, ItemShape, ObjectRef, Sample
from custom_metrics_server.machinery.label_parser import parse_selector

SELECTORS = [parse_selector(text) for text in ("", "resource=cpu", "a in (x,y)", "verb!=GET")]
ENCODERS: dict[str, Callable[..., bytes]] = {
    "json": wire.metric_value_list,
    "protobuf": protobuf.metric_value_list,
}
EXTERNAL: dict[str, Callable[[Sequence[ExternalSample]], bytes]] = {
    "json": wire.external_metric_value_list,
    "protobuf": protobuf.external_metric_value_list,
}


def single_use(samples: Sequence[Sample]) -> list[Sample]:
    return [dataclasses.replace(s, cache={}, reused=False) for s in samples]


def a_sample(rng: random.Random, name: str) -> Sample:
    return Sample(
        described=ObjectRef("Pod", "ns", name, "v1"),
        metric="m",
        value=Decimal(rng.randint(0, 10**6)) / 1000,
        timestamp=1_767_000_000 + rng.randint(0, 120) + rng.random(),
        window=rng.choice([None, 15, 60]),
        labels=rng.choice([{}, {"resource": "cpu"}, {"a": "<&>"}]),
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cached_bodies_equal_the_uncached_encoders_through_random_answers(seed: int) -> None:
    rng = random.Random(seed)
    # Lists of two namespaces, both around the 64-item thresholds, changed a few samples at
    # a time as a backend publishes new values, grown, shrunk, reordered; asked in either
    # encoding, shape and echoed selector, the same list often several times in a row.
    lists = {
        ns: [a_sample(rng, f"{ns}-{i}") for i in range(rng.choice([1, 63, 64, 65, 100]))]
        for ns in ("x", "y")
    }
    for _ in range(40):
        ns = rng.choice(["x", "y"])
        samples = lists[ns]
        change = rng.random()
        if change < 0.3 and samples:  # new values for a few objects
            for i in rng.sample(range(len(samples)), min(len(samples), rng.randint(1, 3))):
                samples[i] = a_sample(rng, samples[i].described.name)
        elif change < 0.4:
            samples.append(a_sample(rng, f"{ns}-{rng.randint(0, 10**6)}"))
        elif change < 0.5 and samples:
            del samples[rng.randrange(len(samples))]
        elif change < 0.55:
            rng.shuffle(samples)
        encoding = rng.choice(["json", "protobuf"])
        shape = rng.choice(list(ItemShape))
        kwargs = {
            "api_version": f"custom.metrics.k8s.io/{shape.value}",
            "shape": shape,
            "metric_selector": rng.choice(SELECTORS),
        }
        encode = ENCODERS[encoding]
        for _ in range(rng.choice([1, 1, 2])):
            cached = encode(list(samples), **kwargs)
            assert cached == encode(single_use(samples), **kwargs), (encoding, kwargs)
        if rng.random() < 0.1:
            render_cache.clear()


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cached_external_bodies_equal_the_uncached_encoders(seed: int) -> None:
    rng = random.Random(seed)
    series = [ExternalSample("q", {"queue": str(i)}, i, 1_767_000_000 + i) for i in range(70)]
    for _ in range(20):
        if rng.random() < 0.5:
            i = rng.randrange(len(series))
            series[i] = ExternalSample("q", {"queue": str(i)}, rng.randint(0, 99), 1_767_000_100)
        chosen = series[: rng.choice([0, 1, 64, 70])]
        encoding = rng.choice(["json", "protobuf"])
        fresh = [dataclasses.replace(s, cache={}, reused=False) for s in chosen]
        assert EXTERNAL[encoding](chosen) == EXTERNAL[encoding](fresh)


def test_rfc3339_second_equals_the_formatter_it_memoises() -> None:
    for second in (0, 1, 1_767_323_045, 4_102_444_800):
        assert render_cache.rfc3339_second(second) == render_cache.rfc3339_second.__wrapped__(
            second
        )
