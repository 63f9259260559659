"""The tick (`backends/definitions/tick.py`) does work proportional to what changed or is due,
not to the number of definitions: a tick after one event looks at that definition only, steady
state reads each source once per interval, a value passing `maxAge` and a schedule's window
edge still flip Ready within a tick, a burst of watch events is one tick, and on random event
sequences the batched tick leaves every definition as the simple loop over all of them does."""

from __future__ import annotations

import asyncio
import copy
import zlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.polled import Polled
from custom_metrics_server.backends.definitions.schedule import (
    ScheduleSource,
    make_schedule,
    next_change,
    scheduled_value,
    window_edges,
)
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, ScheduleSpec, Window
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.backends.definitions.status import _ready_kind
from custom_metrics_server.backends.definitions.tick import COALESCE
from custom_metrics_server.errors import BackendUnavailable
from custom_metrics_server.kube.client import KubeClient
from tests.backends.definitions.test_serving import NOW, constant, obj
from tests.backends.definitions.test_spec import SCHEDULE

UTC = ZoneInfo("UTC")


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Counted(ScheduleSource):
    """A schedule source that counts what the backend asks of it."""

    def __init__(self, schedule: ScheduleSpec, counts: dict[str, int]) -> None:
        super().__init__(schedule)
        self.counts = counts

    async def refresh(self) -> None:
        self.counts["refresh"] = self.counts.get("refresh", 0) + 1

    def values(self, now: float) -> list[Value]:
        self.counts["values"] = self.counts.get("values", 0) + 1
        return super().values(now)

    def targets(self) -> int:
        self.counts["targets"] = self.counts.get("targets", 0) + 1
        return 0


def counting(counts: dict[str, int]) -> Callable[[Definition, SourceTools], Counted]:
    def maker(definition: Definition, tools: SourceTools) -> Counted:
        assert definition.schedule is not None
        return Counted(definition.schedule, counts)

    return maker


def backend(clock: Clock, platform: Platform | None = None, **makers: Any) -> DefinitionsBackend:
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, **makers},
        platform=platform or Platform(),
        clock=clock,
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    return made


def windowed(windows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A schedule in UTC with these windows and no default."""
    spec = copy.deepcopy(SCHEDULE)
    spec["source"]["schedule"] = {"timeZone": "UTC", "windows": windows}
    spec.update(extra)
    return spec


async def test_a_tick_after_one_event_looks_at_that_definition_only() -> None:
    clock, counts = Clock(), dict[str, int]()
    made = backend(clock, Schedule=counting(counts))
    for index in range(300):
        made.catalog.event(
            "ADDED", obj(constant(index, metricName=f"m{index}"), f"d{index}", f"ns{index % 30}")
        )
    await made.tick()
    assert (counts["refresh"], counts["values"], made.ticker.visited) == (300, 300, 300)
    assert counts["targets"] == 300  # each namespace's limit checked once
    # Nothing due (a 1m interval, a constant schedule): a tick a second later looks at none.
    before = dict(counts)
    clock.now += 1
    await made.tick()
    assert counts == before
    assert made.ticker.visited == 300
    # One definition added: that one entered, refreshed, read; its namespace's 10 checked.
    made.catalog.event("ADDED", obj(constant(7, metricName="new"), "new", "ns3"))
    clock.now += 1
    await made.tick()
    assert counts["refresh"] - before["refresh"] == 1
    assert counts["values"] - before["values"] == 1
    assert counts["targets"] - before["targets"] == 11
    assert made.ticker.visited == 301
    state = made.catalog.states[("ns3", "new")]
    assert (state.entered, state.has_value, state.last_value) == (True, True, 7.0)
    # One deleted: nothing to read; the metric stopped serving at the event.
    made.catalog.event("DELETED", obj(constant(7, metricName="new"), "new", "ns3"))
    assert made.external_value("ns3", "new", clock.now) is None
    clock.now += 1
    await made.tick()
    assert made.ticker.visited == 301


async def test_in_steady_state_each_source_is_read_once_per_interval() -> None:
    clock, counts = Clock(), dict[str, int]()
    made = backend(clock, Schedule=counting(counts))
    for index in range(50):
        made.catalog.event("ADDED", obj(constant(index, metricName=f"m{index}"), f"d{index}"))
    for _ in range(180):  # three minutes, a tick a second, a 1m interval
        await made.tick()
        clock.now += 1
    # Three refreshes each (at 0, 60 and 120 s), not 180 reads each.
    assert counts["refresh"] == 50 * 3
    assert counts["values"] == 50 * 3
    assert all(state.has_value for state in made.catalog.states.values())


class Lagging(Polled):
    """A polled source whose read gives one value `lag` seconds old."""

    def __init__(self, interval: float, clock: Clock, lag: float) -> None:
        super().__init__(interval, clock=clock)
        self.lag = lag
        self.reads = 0
        self.calls = 0

    async def read(self) -> list[Value]:
        self.reads += 1
        return [Value(1.0, self.clock() - self.lag)]

    def values(self, now: float) -> list[Value]:
        self.calls += 1
        return super().values(now)


async def test_a_value_passing_max_age_flips_ready_within_a_tick() -> None:
    clock = Clock()
    sources: list[Lagging] = []

    def maker(definition: Definition, tools: SourceTools) -> Lagging:
        sources.append(Lagging(definition.interval, clock, lag=50))
        return sources[-1]

    made = backend(clock, Schedule=maker)
    made.catalog.event("ADDED", obj(constant(1, interval="2m", maxAge="1m"), "aged"))
    state = made.catalog.states[("shop", "aged")]
    ready = []
    for _ in range(130):
        await made.tick()
        ready.append((clock.now - NOW, state.has_value, _ready_kind(state)[0]))
        clock.now += 1
    # Read at 0 s, its value 50 s old: served until 10 s (maxAge 60 s), then not; read again
    # at 120 s: served again.
    flips = [
        (at, has)
        for (at, has, _), before in zip(ready[1:], ready, strict=False)
        if has != before[1]
    ]
    assert ready[0][1:] == (True, "True")
    assert flips == [(11.0, False), (120.0, True)]
    assert ready[11][2] == "False"
    (source,) = sources
    assert source.reads == 2
    assert source.calls <= 6  # the reads, the expiry: not one a tick


async def test_a_schedule_window_edge_flips_ready_within_a_tick() -> None:
    start = datetime(2026, 12, 7, 10, 0, tzinfo=UTC).timestamp()
    clock, counts = Clock(start - 90.5), dict[str, int]()
    made = backend(clock, Schedule=counting(counts))
    spec = windowed([{"start": "10:00", "end": "10:02", "value": 4}], interval="5m")
    made.catalog.event("ADDED", obj(spec, "window"))
    state = made.catalog.states[("shop", "window")]
    seen = []
    for _ in range(400):
        await made.tick()
        seen.append((clock.now - start, state.has_value))
        clock.now += 1
    flips = [
        (at, has) for (at, has), before in zip(seen[1:], seen, strict=False) if has != before[1]
    ]
    assert seen[0] == (-90.5, False)
    assert flips == [(0.5, True), (120.5, False)]
    assert state.last_value == 4.0
    assert counts["values"] <= 6  # the refreshes and the two edges: not one a tick


def test_a_schedules_next_change_is_its_next_window_edge_or_offset_change() -> None:
    paris = ZoneInfo("Europe/Paris")
    spec = ScheduleSpec(paris, (Window(frozenset(), 8 * 60, 9 * 60, 1.0),), None)
    edges = window_edges(spec)
    seven = datetime(2026, 12, 7, 7, 0, tzinfo=paris).timestamp()
    assert abs(next_change(spec, edges, seven) - (seven + 3600)) < 0.01
    # Spring forward (2026-03-29 02:00 -> 03:00 in Paris): the offset change comes first.
    night = datetime(2026, 3, 29, 1, 0, tzinfo=paris).timestamp()
    change = datetime(2026, 3, 29, 1, 0, tzinfo=UTC).timestamp()
    found = next_change(spec, edges, night)
    assert change <= found <= change + 1
    then = next_change(spec, edges, found)
    assert abs(then - datetime(2026, 3, 29, 8, 0, tzinfo=paris).timestamp()) < 0.01
    # No window: nothing ever changes.
    assert next_change(ScheduleSpec(paris, (), 1.0), (), night) == float("inf")


_MINUTE = st.integers(min_value=0, max_value=24 * 4 - 1).map(lambda q: q * 15)


@st.composite
def schedules(draw: st.DrawFn) -> ScheduleSpec:
    windows = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        start = draw(_MINUTE)
        end = draw(st.integers(min_value=start // 15 + 1, max_value=96).map(lambda q: q * 15))
        days = draw(st.frozensets(st.integers(min_value=0, max_value=6), max_size=3))
        windows.append(Window(days, start, end, float(draw(st.integers(0, 3)))))
    zone = ZoneInfo(draw(st.sampled_from(["UTC", "Europe/Paris", "Australia/Lord_Howe"])))
    default = draw(st.sampled_from([None, 9.0]))
    return ScheduleSpec(zone, tuple(windows), default)


@settings(max_examples=150, deadline=None)
@given(
    schedules(),
    st.floats(min_value=1.7e9, max_value=1.9e9),
    st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=20, max_size=20),
)
def test_a_schedule_keeps_its_value_until_its_next_change(
    spec: ScheduleSpec, now: float, fractions: list[float]
) -> None:
    """Never late: the value is the same at every instant between `now` and `next_change`."""
    found = next_change(spec, window_edges(spec), now)
    assert found > now
    value = scheduled_value(spec, now)
    for fraction in fractions:
        assert scheduled_value(spec, now + fraction * (found - now)) == value


async def test_a_burst_of_watch_events_is_one_tick_and_served_at_once() -> None:
    clock = Clock()
    made = backend(clock)
    ticks = 0
    ticked = asyncio.Event()
    tick = made.tick

    async def counted() -> None:
        nonlocal ticks
        ticks += 1
        await tick()
        ticked.set()

    made.tick = counted  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    runner = asyncio.create_task(made._run())
    try:
        await ticked.wait()
        began, first = loop.time(), ticks
        for index in range(200):  # the watch hands events over one by one
            namespace = f"ns{index % 10}"  # 20 each: under the definitions limit
            made.catalog.event(
                "ADDED", obj(constant(index, metricName=f"m{index}"), f"d{index}", namespace)
            )
            # served at the event, before any tick
            assert made.external_value(namespace, f"m{index}", clock.now) == float(index)
            await asyncio.sleep(0)
        while not all(state.entered for state in made.catalog.states.values()):
            ticked.clear()
            await ticked.wait()
        took = loop.time() - began
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    # One tick per COALESCE at most while the events came (one a second besides), not one
    # an event.
    assert ticks - first <= 2 + took / COALESCE + took, (ticks - first, took)
    assert ticks - first < 200


# -- the batched tick against the simple loop over every definition --


def _hash(*parts: object) -> int:
    return zlib.crc32(repr(parts).encode())


class Scripted(Polled):
    """Values by (definition, generation, read): some reads fail, some starts fail, values
    lag their read, the targets change with each read."""

    def __init__(self, definition: Definition, clock: Clock) -> None:
        super().__init__(definition.interval, clock=clock)
        self.key = (definition.namespace, definition.name, definition.generation)
        self.reads = 0

    async def __aenter__(self) -> Scripted:
        if _hash(self.key, "enter") % 7 == 0:
            raise OSError("cannot start")
        return self

    async def read(self) -> list[Value]:
        self.reads += 1
        found = _hash(self.key, self.reads)
        if found % 5 == 0:
            raise SourceError(f"down {found % 3}")
        now = self.clock()
        return [
            Value(float(found % 7 + k), now - found % 90, {"k": str(k)}) for k in range(found % 3)
        ]

    def targets(self) -> int:
        return _hash(self.key, self.reads, "targets") % 3


class Wandering:
    """Values and targets that change with the clock alone, unannounced (as a scraper's)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def __aenter__(self) -> Wandering:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def refresh(self) -> None:
        return None

    def values(self, now: float) -> list[Value]:
        if int(now // 17) % 3 == 0:
            return []
        return [Value(float(int(now // 13) % 4), now - now % 5)]

    def targets(self) -> int:
        return int(self.clock() // 11) % 3


def _maker(clock: Clock) -> Callable[[Definition, SourceTools], Any]:
    def maker(definition: Definition, tools: SourceTools) -> Any:
        kind = definition.name[0]
        if kind == "p":
            return Scripted(definition, clock)
        if kind == "w":
            return Wandering(clock)
        return make_schedule(definition, tools)

    return maker


async def simple_tick(made: DefinitionsBackend) -> None:
    """The tick as a loop over every serving definition (the reference)."""
    catalog = made.catalog
    while catalog.retired:
        await made.ticker.close(catalog.retired.pop())
    catalog.started.clear()
    now = made._clock()
    due = []
    for state in list(catalog.serving.values()):
        source = state.source
        if source is None:
            continue
        if not state.entered:
            state.entered = True
            try:
                await source.__aenter__()
            except Exception as err:
                made.ticker.failed(state, f"starting the source: {err}", now)
                continue
        if state.next_refresh <= now:
            state.next_refresh = now + state.definition.interval
            due.append(state)
    if due:
        await asyncio.gather(*(made.ticker.refresh(state) for state in due))
    catalog.check_targets(list(catalog.by_namespace))
    now = made._clock()
    for state in catalog.serving.values():
        made.ticker.record(state, now)


def _seen(made: DefinitionsBackend) -> dict[object, object]:
    """Everything a reader sees of the definitions: the states, and what each metric serves."""
    seen: dict[object, object] = {}
    for key, state in made.catalog.states.items():
        timed = key[1][0] != "s" and state.last_error is None  # a schedule's time is its read's
        seen[key] = (
            state.valid,
            state.reason,
            state.message,
            state.shadowed_by,
            state.entered,
            state.has_value,
            state.last_value,
            state.value_count,
            state.last_value_time if timed else None,
            state.last_error,
            state.next_refresh,
            _ready_kind(state),
        )
    for (namespace, metric), state in made.catalog.serving.items():
        try:
            served: object = [(v.value, v.timestamp) for v in made._values(state, made._clock())]
        except BackendUnavailable as err:
            served = str(err)
        seen[(namespace, metric, "serves")] = (state.definition.name, served)
    return seen


def _spec(draw: st.DrawFn) -> dict[str, Any]:
    times = ["05:40", "05:47", "05:48", "05:49", "05:51", "05:54"]  # NOW is 05:46:40 UTC
    start = draw(st.sampled_from(times[:-1]))
    end = draw(st.sampled_from([t for t in times if t > start]))
    spec = windowed(
        [{"start": start, "end": end, "value": draw(st.integers(0, 5))}],
        metricName=draw(st.sampled_from(["m1", "m2", "m3"])),
        interval=draw(st.sampled_from(["30s", "1m", "2m"])),
        failure=draw(st.sampled_from(["error", "last-good", "zero"])),
        absent=draw(st.sampled_from(["error", "zero"])),
    )
    max_age = draw(st.sampled_from([None, "45s", "2m"]))
    if max_age is not None:
        spec["maxAge"] = max_age
    return spec


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(min_value=5, max_value=30))):
        kind = draw(st.sampled_from(["add", "add", "delete", "tick", "tick", "tick", "advance"]))
        if kind == "add":
            name = draw(st.sampled_from(["p", "p", "w", "s", "s"])) + str(draw(st.integers(0, 3)))
            namespace = draw(st.sampled_from(["a", "b"]))
            made = obj(
                _spec(draw), name, namespace, draw(st.sampled_from(["", "2026-11-01T00:00:00Z"]))
            )
            made["metadata"]["generation"] = draw(st.integers(1, 3))
            steps.append(("event", ("ADDED", made)))
        elif kind == "delete":
            name = draw(st.sampled_from(["p", "w", "s"])) + str(draw(st.integers(0, 3)))
            steps.append(
                ("event", ("DELETED", obj(constant(1), name, draw(st.sampled_from(["a", "b"])))))
            )
        elif kind == "advance":
            steps.append(("advance", draw(st.sampled_from([0.05, 0.5, 1.0, 7.0, 30.0, 61.0]))))
        else:
            steps.append(("tick", draw(st.sampled_from([0.05, 1.0, 5.0, 13.0, 13.0, 31.0]))))
    return steps


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_batched_tick_leaves_every_definition_as_the_simple_loop_does(
    history: list[tuple[str, Any]],
) -> None:
    async def run() -> None:
        clock = Clock()
        platform = Platform(limits=Limits(definitions=4, scrape_targets=3))
        batched = backend(clock, platform, Schedule=_maker(clock))
        simple = backend(clock, platform, Schedule=_maker(clock))
        for step, (kind, argument) in enumerate(history):
            if kind == "event":
                for made in (batched, simple):
                    made.catalog.event(argument[0], copy.deepcopy(argument[1]))
            elif kind == "advance":
                clock.now += argument
            else:
                await batched.tick()
                await simple_tick(simple)
                assert _seen(batched) == _seen(simple), f"after step {step}"
                clock.now += argument

    asyncio.run(run())


def test_a_looked_at_state_is_planned_once() -> None:
    """Lazy deletion: a state has one live entry; older entries are skipped."""

    async def run() -> None:
        clock = Clock()
        made = backend(clock)
        made.catalog.event("ADDED", obj(constant(1), "one"))
        for _ in range(5):
            await made.tick()
            clock.now += 61
        state: State = made.catalog.states[("shop", "one")]
        live = [entry for entry in made.ticker.schedule if entry[1] == state.wake]
        assert len(live) == 1
        assert len(made.ticker.schedule) <= 2

    asyncio.run(run())
