"""The `formula` source plugged in (backends/definitions/formula_source.py): compiled once by its
maker, evaluated each interval over other definitions' External values of its own namespace
and the platform's External metrics there that the platform allows (`PlatformInputs`, over a
stand-in of the engine's read here; through the real engine in
`tests/plugins/test_external_reads.py` and the real server in
`tests/controlplane/test_metric_definitions_sources.py`), a missing or failing input or a failed
evaluation its error, and cycles and inputs not allowed refused by the catalog."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

import pytest

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.formula_source import (
    FormulaSource,
    PlatformInputs,
    formula_cycles,
    formula_refusals,
    make_formula,
)
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools
from custom_metrics_server.backends.definitions.spec import Refused, parse_definition
from custom_metrics_server.domain import ExternalSample
from custom_metrics_server.errors import BackendTimeout
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.plugins.builtin_definitions import MAKERS
from tests.backends.definitions.test_serving import NOW, constant, external, obj
from tests.backends.definitions.test_spec import definition

Obj = dict[str, Any]


def formula_spec(metric: str, expression: str, **inputs: str) -> Obj:
    return {
        "metricName": metric,
        "servedAs": {"type": "External"},
        "source": {
            "type": "Formula",
            "formula": {
                "expression": expression,
                "inputs": [{"name": name, "metricName": m} for name, m in inputs.items()],
            },
        },
        "interval": "30s",
    }


def tools(values: dict[tuple[str, str], float], asked: list[Any] | None = None) -> SourceTools:
    def external_value(namespace: str, metric: str, now: float) -> float | None:
        if asked is not None:
            asked.append((namespace, metric))
        return values.get((namespace, metric))

    return SourceTools(client=object(), external_value=external_value)


async def test_the_formula_reads_its_own_namespaces_inputs_only() -> None:
    made = parse_definition(
        definition(
            formula_spec("per_worker", "orders / max(workers, 1.0)", orders="q", workers="w")
        )
    )
    asked: list[Any] = []
    values = {("shop", "q"): 42.0, ("shop", "w"): 4.0, ("other", "q"): 1e9, ("other", "w"): 1.0}
    source = make_formula(made, tools(values, asked))
    assert isinstance(source, FormulaSource)
    await source.refresh()
    (value,) = source.values(source.clock())
    assert value.value == 10.5
    assert sorted(asked) == [("shop", "q"), ("shop", "w")]


async def test_a_missing_input_and_a_failed_evaluation_are_reasons_without_a_value() -> None:
    made = parse_definition(definition(formula_spec("r", "a / b", a="qa", b="qb")))
    values = {("shop", "qa"): 1.0, ("shop", "qb"): 2.0}
    source = make_formula(made, tools(values))
    await source.refresh()
    assert [v.value for v in source.values(source.clock())] == [0.5]
    del values[("shop", "qb")]
    with pytest.raises(
        SourceError, match=r"no value for the input\(s\) b \(qb\) in namespace shop"
    ):
        await source.refresh()
    assert source.values(source.clock()) == []  # never the last value of a failed read
    values[("shop", "qb")] = 0.0
    with pytest.raises(SourceError, match="not a finite number"):
        await source.refresh()


@pytest.mark.parametrize(
    ("expression", "inputs", "reason"),
    [
        ("a +", {"a": "x"}, "does not parse"),
        ("a + b", {"a": "x"}, "names b, which is not an input"),
        ('a + size("x")', {"a": "x"}, "strings, lists and maps"),
        ("a + 1", {"a": "x"}, "does not evaluate with every input 1.0"),
        ("a", {"a": "r"}, "this definition's own metric"),
    ],
)
def test_the_maker_refuses_what_does_not_compile(
    expression: str, inputs: dict[str, str], reason: str
) -> None:
    made = parse_definition(definition(formula_spec("r", expression, **inputs)))
    with pytest.raises(Refused) as refused:
        make_formula(made, tools({}))
    assert refused.value.reason == "InvalidFormula"
    assert reason in refused.value.message


def test_cycles_are_found_at_any_depth_and_named() -> None:
    def parsed(metric: str, expression: str, **inputs: str) -> Any:
        return parse_definition(definition(formula_spec(metric, expression, **inputs), name=metric))

    found = formula_cycles(
        [
            parsed("a", "x", x="b"),
            parsed("b", "x + y", x="c", y="s"),
            parsed("c", "x", x="a"),
            parsed("d", "x", x="a"),  # reads the cycle, is not on it
            parsed("e", "x", x="e2"),
            parsed("e2", "x", x="d"),
        ]
    )
    assert sorted(found) == ["a", "b", "c"]
    assert found["a"] == "its inputs form a cycle: a -> b -> c -> a"
    assert found["c"] == "its inputs form a cycle: c -> a -> b -> c"


async def test_the_catalog_refuses_a_cycle_and_serves_once_it_is_broken() -> None:
    clock = [NOW]
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, "Formula": MAKERS["Formula"]},
        platform=Platform(),
        clock=lambda: clock[0],
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    made.catalog.event("ADDED", obj(constant(6), "base"))  # serves expected_load = 6
    made.catalog.event("ADDED", obj(formula_spec("twice", "x * 2.0", x="half"), "twice"))
    made.catalog.event("ADDED", obj(formula_spec("half", "x / 2.0", x="twice"), "half"))
    states = {state["name"]: state for state in made.definition_states()}
    for name in ("twice", "half"):
        assert states[name]["valid"] is False
        assert states[name]["reason"] == "InvalidFormula"
        assert "cycle" in str(states[name]["message"])
    assert made.list_external_metrics() == frozenset({"expected_load"})
    # `half` now reads the schedule: no cycle, both serve, each over the other's last value.
    made.catalog.event("MODIFIED", obj(formula_spec("half", "x / 2.0", x="expected_load"), "half"))
    # A formula over a formula has its value one interval after its input has one.
    for _ in range(2):
        await made.tick()
        clock[0] += 30
    assert await external(made, "half") == [3.0]
    assert await external(made, "twice") == [6.0]


async def test_a_read_is_served_until_three_intervals_have_passed() -> None:
    made = parse_definition(definition(formula_spec("r", "a * 1.0", a="qa")))
    source = make_formula(made, tools({("shop", "qa"): 4.0}))
    now = [1000.0]
    source.clock = lambda: now[0]
    assert source.values(now[0]) == []  # nothing read yet
    await source.refresh()
    assert [v.value for v in source.values(now[0] + 90)] == [4.0]  # interval 30s: 3 intervals
    assert source.values(now[0] + 91) == []


def sample(value: float) -> ExternalSample:
    return ExternalSample(metric="m", labels={}, value=value, timestamp=NOW)


class EngineReads:
    """A stand-in for the engine's read (`plugins.external_reads`): series by (namespace,
    metric), or the StatusError a metric fails with; every read recorded."""

    def __init__(self, series: dict[tuple[str, str], list[float]]) -> None:
        self.series = series
        self.failing: dict[str, Exception] = {}
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, namespace: str, metric: str) -> Sequence[ExternalSample]:
        self.asked.append((namespace, metric))
        if metric in self.failing:
            raise self.failing[metric]
        return [sample(v) for v in self.series.get((namespace, metric), [])]


def platform_tools(
    definitions: dict[tuple[str, str], float | None], reads: EngineReads, allowed: str = ".*"
) -> SourceTools:
    """Definitions' values (None: a definition serves it, without a value) and the platform's
    metrics the `allowed` pattern lets formulas read."""
    inputs = PlatformInputs(lambda metric: re.fullmatch(allowed, metric) is not None)
    inputs.connect(reads)
    return SourceTools(
        client=object(),
        external_value=lambda namespace, metric, now: definitions.get((namespace, metric)),
        defines=lambda namespace, metric: (namespace, metric) in definitions,
        platform_value=inputs.value,
    )


async def test_an_input_no_definition_serves_is_the_platforms_in_the_same_namespace() -> None:
    made = parse_definition(definition(formula_spec("r", "q / w", q="queue", w="workers")))
    reads = EngineReads({("shop", "queue"): [30.0, 12.0], ("other", "queue"): [9000.0]})
    source = make_formula(made, platform_tools({("shop", "workers"): 2.0}, reads))
    await source.refresh()
    assert [v.value for v in source.values(source.clock())] == [21.0]  # its series summed
    assert reads.asked == [("shop", "queue")]  # the definition's namespace; workers from memory


async def test_a_definitions_input_without_a_value_is_never_read_from_the_platform() -> None:
    made = parse_definition(definition(formula_spec("r", "q * 1.0", q="queue")))
    reads = EngineReads({("shop", "queue"): [5.0]})
    source = make_formula(made, platform_tools({("shop", "queue"): None}, reads))
    with pytest.raises(SourceError, match=r"no value for the input\(s\) q \(queue\)"):
        await source.refresh()
    assert reads.asked == []


async def test_a_missing_or_failing_platform_input_is_the_error_with_the_engines_reason() -> None:
    made = parse_definition(definition(formula_spec("r", "a + b", a="qa", b="qb")))
    reads = EngineReads({("shop", "qa"): [1.0], ("shop", "qb"): [2.0]})
    source = make_formula(made, platform_tools({}, reads))
    await source.refresh()
    assert [v.value for v in source.values(source.clock())] == [3.0]
    reads.series.pop(("shop", "qb"))
    with pytest.raises(SourceError, match=r"no value for the input\(s\) b \(qb\) in namespace"):
        await source.refresh()
    assert source.values(source.clock()) == []
    reads.failing["qa"] = BackendTimeout("the slow backend did not answer within 1s")
    with pytest.raises(SourceError) as failed:
        await source.refresh()
    assert "input a (qa): the slow backend did not answer within 1s" in str(failed.value)
    assert "no value for the input(s) b (qb)" in str(failed.value)


async def test_a_platform_metric_not_allowed_or_not_connected_is_never_read() -> None:
    made = parse_definition(definition(formula_spec("r", "q * 1.0", q="queue")))
    reads = EngineReads({("shop", "queue"): [5.0]})
    source = make_formula(made, platform_tools({}, reads, allowed="other_.*"))
    with pytest.raises(SourceError, match=r"input q \(queue\): .*formulaPlatformInputs"):
        await source.refresh()
    assert reads.asked == []
    unconnected = PlatformInputs(lambda metric: True)
    with pytest.raises(SourceError, match="not connected yet"):
        await unconnected.value("shop", "queue")


def test_refusals_name_the_input_the_platform_does_not_allow() -> None:
    def parsed(metric: str, expression: str, **inputs: str) -> Any:
        return parse_definition(definition(formula_spec(metric, expression, **inputs), name=metric))

    serving = [
        parsed("ratio", "a / b", a="served", b="platform_queue"),
        parsed("served", "x * 1.0", x="platform_queue"),
        parsed("secret", "x * 1.0", x="cluster_queue"),
        parsed("loop", "x * 1.0", x="loop2"),
        parsed("loop2", "x * 1.0", x="loop"),
    ]
    refused = formula_refusals(serving, lambda metric: metric.startswith("platform_"))
    assert sorted(refused) == ["loop", "loop2", "secret"]
    reason, message = refused["secret"]
    assert reason == "InputNotAllowed"
    assert message.startswith("input x (cluster_queue): no definition of namespace shop")
    assert refused["loop"][0] == "InvalidFormula"


async def test_a_refused_formula_serves_once_a_definition_serves_its_input() -> None:
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, "Formula": MAKERS["Formula"]},
        platform=Platform(),
        clock=lambda: NOW,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    made.catalog.event("ADDED", obj(formula_spec("twice", "x * 2.0", x="expected_load"), "twice"))
    (state,) = made.definition_states()
    assert (state["valid"], state["reason"]) == (False, "InputNotAllowed")
    assert "input x (expected_load)" in str(state["message"])
    made.catalog.event("ADDED", obj(constant(6), "base"))  # serves expected_load = 6
    states = {state["name"]: state for state in made.definition_states()}
    assert (states["twice"]["valid"], states["twice"]["reason"]) == (True, "Serving")
    await made.tick()
    assert await external(made, "twice") == [12.0]
