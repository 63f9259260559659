"""The status writer's pacing, on an injected clock: a new definition's status at once, a value
change at most once a minute, a condition change at once, the global rate with the urgent
first, one Event per Ready transition, only the leader writing, a 404 forgotten.

The API server here is `Objects`, a dict of objects with resourceVersions that counts writes:
pacing is the writer's arithmetic, not the API server's. Its real twin, where a conflict is
staged between a read and a write and the status, Events and two replicas are checked against
a real kube-apiserver, is tests/controlplane/test_metric_definitions_status.py.
"""

from __future__ import annotations

import copy
from typing import Any, cast

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceError, Value
from custom_metrics_server.backends.definitions.status import (
    desired,
    significant,
    significant_of,
)
from custom_metrics_server.backends.definitions.status_writer import StatusWriter
from custom_metrics_server.kube.client import KubeApiError, KubeClient
from tests.backends.definitions.test_serving import Fixed, constant, obj
from tests.backends.definitions.test_spec import PODS

NOW = 1_765_000_000.0
Obj = dict[str, Any]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Objects:
    """The definitions' objects by status path; PUT checks the resourceVersion as the API
    server does (409 when stale, 404 when gone) and bumps it."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.puts: list[str] = []
        self.events: list[Obj] = []
        self.version = 1

    def add(self, made: Obj) -> Obj:
        meta = made["metadata"]
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        path = (
            "/apis/metrics.custom-metrics-server.io/v1alpha1/namespaces/"
            f"{meta['namespace']}/metricdefinitions/{meta['name']}/status"
        )
        self.objects[path] = made
        return made

    async def put_json(self, path: str, body: Obj) -> Obj:
        self.puts.append(path)
        current = self.objects.get(path)
        if current is None:
            raise KubeApiError(404, "NotFound", "not found")
        if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise KubeApiError(409, "Conflict", "the object has been modified")
        self.version += 1
        current["metadata"]["resourceVersion"] = str(self.version)
        current["status"] = body["status"]
        return current

    async def get_json(self, path: str) -> Obj:
        if path not in self.objects:
            raise KubeApiError(404, "NotFound", "not found")
        return self.objects[path]

    async def post_json(self, path: str, body: Obj) -> Obj:
        self.events.append(body)
        return body


class Failing:
    """A source whose reads fail while `failing` is set."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.failing: str | None = None

    async def __aenter__(self) -> Failing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def refresh(self) -> None:
        if self.failing:
            raise SourceError(self.failing)

    def values(self, now: float) -> list[Value]:
        return [] if self.failing else [Value(self.value, now)]

    def targets(self) -> int:
        return 1


def setup(
    *, leader: bool | None = None, **writer: Any
) -> tuple[DefinitionsBackend, StatusWriter, Objects, Clock]:
    api, clock = Objects(), Clock()
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule},
        platform=Platform(),
        clock=clock,
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    status = StatusWriter(
        cast("KubeClient", api),
        made.catalog,
        identity="replica-a",
        leader=None if leader is None else (lambda: leader),
        clock=clock,
        **writer,
    )
    return made, status, api, clock


def add(made: DefinitionsBackend, api: Objects, value: float, name: str) -> None:
    """A definition of the metric `m_<name>` (one serving definition each)."""
    made.catalog.event("ADDED", api.add(obj(constant(value, metricName=f"m_{name}"), name)))


async def test_a_new_definition_is_written_at_once_then_at_most_once_a_minute() -> None:
    made, writer, api, clock = setup()
    add(made, api, 7, "load")
    assert await writer.round() == 0  # its source not read yet: nothing worth writing
    await made.tick()
    assert await writer.round() == 1
    (written,) = api.objects.values()
    status = written["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Valid"]["status"], conditions["Valid"]["reason"]) == ("True", "Accepted")
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("True", "Serving")
    assert "m_load" in conditions["Ready"]["message"]
    assert status["observedGeneration"] == 3
    assert (status["lastValue"], status["valueCount"]) == ("7", 1)
    assert status["route"] == {"api": "external"}
    # The value's time moves with every tick; nothing else changed: written once a minute.
    for step in range(59):
        clock.now += 1
        await made.tick()
        assert await writer.round() == 0, f"written again after {step + 1}s"
    clock.now += 1
    await made.tick()
    assert await writer.round() == 1
    assert len(api.puts) == 2


async def test_a_condition_change_is_written_at_once_with_one_event() -> None:
    failing = Failing(5)
    api, clock = Objects(), Clock()
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": lambda definition, tools: failing},
        platform=Platform(),
        clock=clock,
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    writer = StatusWriter(cast("KubeClient", api), made.catalog, identity="a", clock=clock)
    add(made, api, 5, "load")
    await made.tick()
    assert await writer.round() == 1
    assert [(e["type"], e["reason"]) for e in api.events] == [("Normal", "Serving")]
    clock.now += 2
    failing.failing = "connection refused"
    made.catalog.states[("shop", "load")].next_refresh = 0  # due again
    await made.tick()
    assert await writer.round() == 1  # two seconds after the last write: a condition changed
    (written,) = api.objects.values()
    ready = {c["type"]: c for c in written["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "SourceFailing")
    assert "connection refused" in ready["message"]
    assert written["status"]["lastError"] == "connection refused"
    assert [(e["type"], e["reason"]) for e in api.events] == [
        ("Normal", "Serving"),
        ("Warning", "SourceFailing"),
    ]
    event = api.events[-1]
    assert event["regarding"]["name"] == "load"
    assert "connection refused" in event["note"]
    # Still failing: no new write in the minute, no second Event.
    clock.now += 5
    await made.tick()
    assert await writer.round() == 0
    assert len(api.events) == 2


async def test_the_global_rate_bounds_writes_and_condition_changes_go_first() -> None:
    made, writer, api, clock = setup(rate=10.0, burst=10.0)
    for index in range(35):
        add(made, api, index, f"d{index}")
    await made.tick()
    counts = []
    for _ in range(4):
        counts.append(await writer.round())
        clock.now += 1
    assert counts == [10, 10, 10, 5]
    # A minute later every definition is due a routine write; one turns invalid in between.
    clock.now += 60
    await made.tick()
    made.catalog.event(
        "MODIFIED", api.add(obj(constant(1, metricName="m_d20", interval="1s"), "d20"))
    )  # under the platform's shortest interval: Valid turns False
    await writer.round()
    first = api.puts[35]
    assert first.endswith("/metricdefinitions/d20/status")
    (refused,) = [o for p, o in api.objects.items() if p == first]
    valid = {c["type"]: c for c in refused["status"]["conditions"]}["Valid"]
    assert (valid["status"], valid["reason"]) == ("False", "OverLimit")
    assert len(api.puts) == 45


async def test_a_standby_writes_nothing_and_a_new_leader_only_what_differs() -> None:
    made, standby, api, clock = setup(leader=False)
    add(made, api, 7, "load")
    await made.tick()
    assert not standby.leading
    # The leader (another writer, as another replica would) writes; the standby's watch
    # delivers the object it wrote.
    _, leader, _, _ = setup()
    leader.catalog = made.catalog
    leader.client = cast("KubeClient", api)
    assert await leader.round() == 1
    made.catalog.event("MODIFIED", next(iter(api.objects.values())))
    # Taking over, the former standby finds the status as it would write it: nothing to do.
    taking_over = StatusWriter(
        cast("KubeClient", api), made.catalog, identity="b", clock=clock, leader=lambda: True
    )
    assert await taking_over.round() == 0
    assert len(api.puts) == 1


async def test_a_conflict_is_read_again_and_written_and_a_deleted_object_forgotten() -> None:
    made, writer, api, _ = setup()
    add(made, api, 7, "load")
    add(made, api, 8, "gone")
    await made.tick()
    # Someone else wrote "load" since the watch's copy: its resourceVersion is stale.
    (path,) = [p for p in api.objects if "/load/" in p]
    api.objects[path]["metadata"]["resourceVersion"] = "999"
    (gone,) = [p for p in api.objects if "/gone/" in p]
    del api.objects[gone]  # deleted; the watch has not said so yet
    assert await writer.round() == 1
    assert writer.conflicts == 1
    assert "status" in api.objects[path]
    assert writer.writes == 1


async def test_the_writer_s_cheap_comparison_equals_the_written_status_s() -> None:
    """`significant_of(state)` (what `due` compares) is `significant` of the status it would
    write, for a state of every Ready reason and a Valid False one."""
    failing = Failing(5)
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": make_schedule, "Pods": lambda definition, tools: failing},
        platform=Platform(),
        clock=Clock(),
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    api = Objects()
    add(made, api, 7, "served")
    made.catalog.event("ADDED", api.add(obj(constant(1, metricName="m_served"), "shadowed")))
    made.catalog.event("ADDED", api.add(obj(constant(1, metricName="x", interval="1s"), "slow")))
    none = constant(1, metricName="m_none")
    none["source"]["schedule"].pop("defaultValue")
    made.catalog.event("ADDED", api.add(obj(none, "none")))
    await made.tick()
    states = made.catalog.states
    reasons = set()
    for state in states.values():
        want = desired(state, {}, NOW)
        assert significant_of(state) == significant(want), state.definition.name
        reasons.add(next(c["reason"] for c in want["conditions"] if c["type"] == "Ready"))
    state = states[("shop", "served")]
    state.last_error = "down"
    assert significant_of(state) == significant(desired(state, {}, NOW))
    state.source = None
    assert significant_of(state) == significant(desired(state, {}, NOW))
    assert reasons == {"Serving", "Shadowed", "NotValid", "NoValue"}


async def test_a_source_that_answers_after_its_first_tick_gets_one_status_and_one_event() -> None:
    """A `pods` source's scraper answers after the tick that started it: no "no value"
    status and Warning first; within its first interval the writer waits for the answer."""
    late = Failing(6)
    late.failing = None
    answered = False
    late.values = lambda now: [Value(6, now)] if answered else []  # type: ignore[method-assign]
    api, clock = Objects(), Clock()
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Schedule": lambda definition, tools: late},
        platform=Platform(),
        clock=clock,
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    writer = StatusWriter(cast("KubeClient", api), made.catalog, identity="a", clock=clock)
    add(made, api, 6, "scraped")
    await made.tick()
    assert await writer.round() == 0
    clock.now += 1
    answered = True
    await made.tick()
    assert await writer.round() == 1
    assert [(e["type"], e["reason"]) for e in api.events] == [("Normal", "Serving")]
    # A source with nothing at all: its "no value" status comes after its first interval.
    _, quiet_writer, quiet_api, _ = setup()
    quiet = quiet_writer.catalog
    none = constant(1, metricName="m_none")
    none["source"]["schedule"].pop("defaultValue")
    quiet.event("ADDED", quiet_api.add(obj(none, "none")))
    state = quiet.states[("shop", "none")]
    state.next_refresh = clock.now + 30
    assert await quiet_writer.due(clock.now) == []
    assert await quiet_writer.due(clock.now + 30) == [state]


async def test_a_pods_metrics_status_shows_the_average_over_its_pods_and_its_route() -> None:
    """Pods: the average over the pods with a value (what each pod's HPA target is compared
    with), from two pods; the route names the resource; the status page shows the same."""
    pods = [Value(2, NOW, pod="web-1"), Value(4, NOW, pod="web-2")]
    spec = copy.deepcopy(PODS)
    spec["servedAs"] = {"type": "Pods"}
    api, clock = Objects(), Clock()
    made = DefinitionsBackend(
        cast("KubeClient", object()),
        makers={"Pods": lambda definition, tools: Fixed(pods)},
        platform=Platform(),
        clock=clock,
        write_status=False,
    )
    made.catalog.list_started()
    made.catalog.list_finished()
    writer = StatusWriter(cast("KubeClient", api), made.catalog, identity="a", clock=clock)
    made.catalog.event("ADDED", api.add(obj(spec, "web")))
    await made.tick()
    assert await writer.round() == 1
    (written,) = api.objects.values()
    status = written["status"]
    assert (status["lastValue"], status["valueCount"]) == ("3", 2)
    assert status["route"] == {"api": "custom", "resource": "pods"}
    (shown,) = made.definition_states()
    assert shown["lastValue"] == 3.0
