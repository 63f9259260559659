"""The plugin adapter: capabilities read at load time, defaults for what is missing, and the
guards against a plugin that breaks the contract."""

from __future__ import annotations

import itertools
import logging
import random
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from custom_metrics_server import sdk
from custom_metrics_server.plugins.adapter import (
    ContractViolation,
    PluginBackend,
    PluginError,
    capabilities,
)

PODS = sdk.ResourceMapping(sdk.GroupResource("", "pods"), "v1", "Pod", True)
INFO = sdk.MetricInfo(PODS.group_resource, True, "m")


def custom_request(*names: str) -> sdk.BackendRequest:
    return sdk.BackendRequest(
        metric=INFO,
        mapping=PODS,
        objects=tuple(("ns", name) for name in names),
        metric_selector=sdk.EVERYTHING,
    )


EXTERNAL = sdk.ExternalBackendRequest(
    metric="depth", namespace="ns", metric_selector=sdk.EVERYTHING
)


class ExternalOnly:
    def list_external_metrics(self) -> list[str]:
        return ["depth"]

    def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        return [sdk.external_sample(request, 3, labels={"thread": threading.current_thread().name})]


class CustomAnswering:
    """Custom only; its answer is whatever the test sets."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer
        self.listing: Any = [INFO]

    def list_metrics(self) -> Any:
        if isinstance(self.listing, Exception):
            raise self.listing
        return self.listing

    async def fetch(self, request: sdk.BackendRequest) -> Any:
        return self.answer


async def started(plugin: object, **kwargs: Any) -> PluginBackend:
    backend = PluginBackend(plugin, name="p", **kwargs)
    await backend.__aenter__()
    return backend


def test_an_external_only_backend_needs_no_stub_methods() -> None:
    found = capabilities(ExternalOnly(), where="backend 'p'")
    assert (found.custom, found.external, found.external_async) == (False, True, False)
    assert found.describe() == "external (threads)"


def test_half_a_pair_names_the_backend_and_the_missing_method() -> None:
    class Half:
        def list_metrics(self) -> list[sdk.MetricInfo]:
            return []

    with pytest.raises(
        PluginError, match=r"backend 'p': the backend has list_metrics\(\) but no fetch\(\)"
    ):
        capabilities(Half(), where="backend 'p'")


def test_an_object_with_no_source_is_not_a_backend() -> None:
    with pytest.raises(PluginError, match="backend 'p': dict is not a backend"):
        capabilities({}, where="backend 'p'")


def test_a_lifecycle_needs_both_halves() -> None:
    class Enter(ExternalOnly):
        async def __aenter__(self) -> Enter:
            return self

    with pytest.raises(PluginError, match="one of __aenter__/__aexit__"):
        capabilities(Enter(), where="backend 'p'")


async def test_a_plain_fetch_runs_in_the_backends_own_threads() -> None:
    backend = await started(ExternalOnly())
    assert backend.list_metrics() == frozenset()
    assert backend.list_external_metrics() == frozenset({"depth"})
    (series,) = await backend.fetch_external(EXTERNAL)
    assert series.labels == {"thread": "backend-p-0"}
    assert await backend.fetch(custom_request("a")) == ()
    await backend.__aexit__(None, None, None)


async def test_without_readiness_a_backend_is_ready_once_started_until_stopped() -> None:
    backend = PluginBackend(ExternalOnly(), name="p")
    assert backend.ready() == sdk.Readiness(False, "starting")
    await backend.__aenter__()
    assert backend.ready() == sdk.Readiness(True)
    await backend.__aexit__(None, None, None)
    assert backend.ready() == sdk.Readiness(False, "stopped")


async def test_a_listing_that_raises_is_empty_not_ready_and_logged_once_until_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = CustomAnswering()
    backend = await started(plugin)
    plugin.listing = RuntimeError("database gone")
    caplog.set_level(logging.INFO)
    assert backend.list_metrics() == frozenset()
    assert backend.list_metrics() == frozenset()
    assert backend.ready() == sdk.Readiness(
        False, "list_metrics() raised RuntimeError: database gone"
    )
    assert caplog.text.count("database gone") == 1
    plugin.listing = [INFO]
    assert backend.list_metrics() == frozenset({INFO})
    assert backend.ready().ready
    assert "list_metrics() answers again" in caplog.text


@pytest.mark.parametrize(
    ("listing", "reason"),
    [
        pytest.param("pods/m", "returned a str, not a collection", id="a-string"),
        pytest.param(None, "returned a NoneType, not a collection", id="none"),
        pytest.param(["m"], "returned an item 'm' that is not a MetricInfo", id="names-not-infos"),
        pytest.param([("pods", True, "m")], "that is not a MetricInfo", id="resource-not-a-pair"),
    ],
)
async def test_a_listing_of_the_wrong_type_is_empty_and_not_ready(
    listing: object, reason: str
) -> None:
    plugin = CustomAnswering()
    plugin.listing = listing
    backend = await started(plugin)
    assert backend.list_metrics() == frozenset()
    assert reason in backend.ready().reason
    assert not backend.ready().ready


async def test_plain_tuples_are_read_as_metric_infos() -> None:
    plugin = CustomAnswering()
    plugin.listing = [(("", "pods"), True, "m")]
    backend = await started(plugin)
    assert backend.list_metrics() == frozenset({INFO})


async def test_an_unchanged_listing_is_the_same_object() -> None:
    plugin = CustomAnswering()
    backend = await started(plugin)
    first = backend.list_metrics()
    plugin.listing = [INFO]  # a new list, same content
    assert backend.list_metrics() is first


async def test_a_listing_changed_in_place_is_read_by_value() -> None:
    plugin = CustomAnswering()
    plugin.listing = {INFO}
    backend = await started(plugin)
    first = backend.list_metrics()
    assert first == frozenset({INFO})
    other = sdk.MetricInfo(PODS.group_resource, True, "other")
    plugin.listing.add(other)  # the same set object, one more metric
    assert backend.list_metrics() == frozenset({INFO, other})
    assert backend.list_metrics() is backend.list_metrics()  # unchanged again: one object
    plugin.listing.discard(INFO)
    assert backend.list_metrics() == frozenset({other})


@pytest.mark.parametrize("seed", range(5))
async def test_listings_equal_a_fresh_read_through_random_changes(seed: int) -> None:
    """The adapter's listing memo against the plugin's listing read afresh, through changes in
    place, new objects of every kind (set, list, tuple, frozenset, an iterator), equal ones,
    and invalid ones in between; an unchanged value is the same frozenset."""
    rng = random.Random(seed)
    infos = [sdk.MetricInfo(PODS.group_resource, True, f"m{i}") for i in range(6)]
    plugin = CustomAnswering()
    current: set[sdk.MetricInfo] = set()
    plugin.listing = current
    backend = await started(plugin)
    last = backend.list_metrics()
    for _ in range(60):
        roll = rng.random()
        if roll < 0.4:  # the set the plugin returns, changed in place
            current.symmetric_difference_update({rng.choice(infos)})
            plugin.listing = current
        elif roll < 0.5:
            plugin.listing = ["not an info"]
            last = backend.list_metrics()
            assert last == frozenset()
            plugin.listing = current
        else:  # a new object, of an equal or another value
            kind = rng.choice([set, list, tuple, frozenset, iter])
            current = set(current) if rng.random() < 0.5 else set(rng.sample(infos, 3))
            plugin.listing = current if kind is set else kind(current)
        found = backend.list_metrics()
        assert found == frozenset(current)
        if found == last:
            assert found is last or not last
        last = found


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param({"ns/a": 1}, "returned a dict, not a list of Sample", id="a-dict"),
        pytest.param(None, "returned a NoneType, not a list of Sample", id="none"),
        pytest.param([{"value": 1}], "returned a dict, not a Sample", id="dict-items"),
        pytest.param([1], "returned an int, not a Sample", id="int-items"),
        pytest.param(
            [sdk.ExternalSample("m", {}, 1, 0.0)],
            "returned an ExternalSample, not a Sample",
            id="wrong-kind",
        ),
    ],
)
async def test_a_fetch_answer_of_the_wrong_type_is_a_contract_violation(
    answer: object, message: str
) -> None:
    backend = await started(CustomAnswering(answer))
    with pytest.raises(ContractViolation, match=message):
        await backend.fetch(custom_request("a"))


async def test_more_samples_than_objects_is_a_contract_violation() -> None:
    request = custom_request("a")
    answer = [sdk.sample(request, ("ns", "a"), 1)] * 2
    backend = await started(CustomAnswering(answer))
    with pytest.raises(ContractViolation, match="returned 2 items for 1 objects requested"):
        await backend.fetch(request)


async def test_a_runaway_generator_is_read_one_past_its_bound() -> None:
    request = custom_request("a", "b")
    consumed = 0

    def endless() -> Iterator[sdk.Sample]:
        nonlocal consumed
        for _ in itertools.count():
            consumed += 1
            yield sdk.sample(request, ("ns", "a"), 1)

    backend = await started(CustomAnswering(endless()))
    with pytest.raises(ContractViolation, match="returned more than 2 items"):
        await backend.fetch(request)
    assert consumed == 3


async def test_external_series_are_bounded_by_max_series() -> None:
    answer = [sdk.external_sample(EXTERNAL, i) for i in range(6)]

    class Many(ExternalOnly):
        def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
            return answer

    backend = await started(Many(), max_series=5)
    with pytest.raises(ContractViolation, match="returned 6 items for 5 series allowed"):
        await backend.fetch_external(EXTERNAL)


async def test_non_finite_values_are_absent() -> None:
    request = custom_request("a", "b", "c")
    answer = [
        sdk.sample(request, ("ns", "a"), float("nan")),
        sdk.sample(request, ("ns", "b"), Decimal("Infinity")),
        sdk.sample(request, ("ns", "c"), 2.5),
    ]
    backend = await started(CustomAnswering(answer))
    assert [s.described.name for s in await backend.fetch(request)] == ["c"]


@pytest.mark.parametrize("value", [True, "1", None], ids=repr)
async def test_a_value_that_is_not_a_number_is_a_contract_violation(value: object) -> None:
    request = custom_request("a")
    answer = [sdk.sample(request, ("ns", "a"), value)]  # type: ignore[arg-type]
    backend = await started(CustomAnswering(answer))
    with pytest.raises(ContractViolation, match="not an int, float or Decimal"):
        await backend.fetch(request)


async def test_a_plain_function_handing_back_a_coroutine_is_awaited() -> None:
    class Lazy(ExternalOnly):
        def fetch_external(self, request: sdk.ExternalBackendRequest) -> Any:
            async def later() -> list[sdk.ExternalSample]:
                return [sdk.external_sample(request, 7)]

            return later()

    backend = await started(Lazy())
    assert [s.value for s in await backend.fetch_external(EXTERNAL)] == [7]


@pytest.mark.parametrize(
    ("ready", "reason"),
    [
        pytest.param(RuntimeError("no"), "ready() raised RuntimeError: no", id="raises"),
        pytest.param(True, "ready() returned a bool, not a Readiness", id="a-bool"),
    ],
)
async def test_a_misbehaving_readiness_is_not_ready(ready: object, reason: str) -> None:
    class Odd(ExternalOnly):
        def ready(self) -> Any:
            if isinstance(ready, Exception):
                raise ready
            return ready

    backend = await started(Odd())
    assert backend.ready() == sdk.Readiness(False, reason)


async def test_the_lifecycle_is_entered_and_left_and_a_failing_exit_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: list[str] = []

    class Managed(ExternalOnly):
        async def __aenter__(self) -> Managed:
            events.append("enter")
            return self

        async def __aexit__(self, *exc: object) -> None:
            events.append("exit")
            raise RuntimeError("close failed")

    backend = await started(Managed())
    await backend.__aexit__(None, None, None)
    assert events == ["enter", "exit"]
    assert "backend 'p' failed to stop" in caplog.text
