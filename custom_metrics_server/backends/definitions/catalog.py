"""The definitions the server knows, which of them serve, and the state of each: the
`WatchSink` of the list+watch of `metricdefinitions` across namespaces.

Per namespace, on every event in it (`_resolve`), oldest first (creationTimestamp, then name):

1. a definition the spec check refused (`spec.parse_definition`) or the platform's policy
   refuses (`policy.Platform.admit`: source type, shortest interval) is not valid;
2. the valid ones past the namespace's `definitions` limit are refused `OverLimit`;
3. a valid definition of a metric that the router gives to a platform backend (one that does
   not yield: by a route or by its listing; `precedence.winner`) is `ShadowedByPlatform`
   (`platform`), in every namespace;
4. of two other valid definitions of one metric name, the older serves and the newer is
   `Shadowed` by it (`shadowed_by`); the formulas among those that serve whose inputs form a
   cycle are refused `InvalidFormula`, those with an input no definition of the namespace
   serves and the platform does not allow `InputNotAllowed` (`formula_source.formula_refusals`);
5. a serving `pods` source past the namespace's `scrape_targets` limit (its targets added to
   the older ones') is refused `OverLimit` by `check_targets`, run by the backend's tick over
   the namespaces that changed since (`_touched`) and those it names.

A serving definition has a source (made here, at the event, so that a schedule serves at once,
and queued in `started` for the backend's tick to enter: it enters and exits sources, which
needs the event loop). Deleting a definition takes it out of `serving` in the event itself:
its metric stops being served at once, and its source is left in `retired` for the backend to
close.

The platform's listings change at run time (Prometheus discovers series, a plugin's listing
changes): `follow_platform`, run by the backend's tick, asks the router again for every valid
definition when its `platform_generation` moved, and re-decides the namespaces where an answer
changed, so a definition serves again by itself when the platform stops listing its name.

PURE: no I/O. Cost: an event O(definitions of its namespace x log), plus O(formulas^2 x inputs)
of its serving formulas for the cycle check, plus one router decision per valid definition of
the namespace (memoised by the router); `follow_platform` O(1) while the platform's listings
are unchanged, else O(valid definitions) router decisions; a lookup O(1); `check_targets`
O(serving definitions of the namespaces checked x log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from custom_metrics_server.backends.definitions import shadowing
from custom_metrics_server.backends.definitions.formula_source import formula_refusals
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.shadowing import PODS, winner_of
from custom_metrics_server.backends.definitions.source import Source, SourceMaker, SourceTools
from custom_metrics_server.backends.definitions.spec import Refused, parse_definition
from custom_metrics_server.backends.definitions.state import State
from custom_metrics_server.domain import MetricInfo
from custom_metrics_server.kube.keyed_sink import KeyedSink
from custom_metrics_server.sdk.precedence import Precedence, Winner

__all__ = ["PODS", "Catalog", "State"]

logger = logging.getLogger(__name__)


def _observe(state: State, obj: Mapping[str, Any]) -> None:
    """Keep the object's resourceVersion and status (the status writer's starting point)."""
    state.resource_version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    status = obj.get("status")
    state.observed_status = status if isinstance(status, Mapping) else {}


class Catalog(KeyedSink[tuple[str, str]]):
    """Every watched definition's `State`, and the serving one per (namespace, metric)."""

    def __init__(
        self,
        platform: Platform,
        makers: Mapping[str, SourceMaker],
        tools: SourceTools,
    ) -> None:
        super().__init__()
        self.platform = platform
        self.makers = dict(makers)
        self.tools = tools
        self.states: dict[tuple[str, str], State] = {}
        #: namespace -> name -> state (the same states, for per-namespace decisions)
        self.by_namespace: dict[str, dict[str, State]] = {}
        #: namespace -> the metrics it has in `serving`
        self._served: dict[str, set[str]] = {}
        #: (namespace, metric) -> the state serving it
        self.serving: dict[tuple[str, str], State] = {}
        #: sources of definitions that changed or left, for the backend to close
        self.retired: list[Source] = []
        #: states whose source was made since the backend's last tick, for it to enter
        self.started: list[State] = []
        #: namespaces decided again since the last `check_targets`
        self._touched: set[str] = set()
        self.generation = 0
        self._listing: tuple[int, frozenset[MetricInfo], frozenset[str]] | None = None
        #: called after every change (the backend wakes its tick)
        self.changed: Callable[[], None] = lambda: None
        #: the router in force (`yield_to`); None: nothing wins over definitions
        self.precedence: Precedence | None = None
        self._platform_seen: tuple[Precedence, int] | None = None

    # -- the WatchSink (`KeyedSink`) --

    def keys(self) -> Iterable[tuple[str, str]]:
        return self.states.keys()

    def key_of(self, obj: Mapping[str, Any]) -> tuple[str, str] | None:
        meta = obj.get("metadata") or {}
        return (str(meta.get("namespace")), str(meta.get("name")))

    # -- changes --

    def apply(self, obj: Mapping[str, Any]) -> tuple[str, str] | None:
        try:
            definition = parse_definition(obj)
        except (KeyError, TypeError):
            logger.warning("metric definitions: an object without metadata, skipped")
            return None
        key = definition.key
        old = self.states.get(key)
        if old is not None and old.definition == definition:
            # a status write or a relist: nothing that serving reads changed
            _observe(old, obj)
            return key
        if old is not None:
            self._retire(old)
        state = self.states[key] = State(definition)
        _observe(state, obj)
        self.by_namespace.setdefault(key[0], {})[key[1]] = state
        state.own_refusal = definition.refusal or self.platform.admit(
            definition, frozenset(self.makers)
        )
        if state.own_refusal is not None:
            logger.info("metric definition %s/%s refused (%s): %s", *key, *state.own_refusal)
        self._resolve(definition.namespace)
        return key

    def remove(self, key: tuple[str, str]) -> None:
        state = self.states.pop(key, None)
        if state is None:
            return
        namespace = self.by_namespace.get(key[0], {})
        namespace.pop(key[1], None)
        if not namespace:
            self.by_namespace.pop(key[0], None)
        self._retire(state)
        logger.info(
            "metric definition %s/%s deleted: %s no longer served by it",
            *key,
            state.definition.metric,
        )
        self._resolve(key[0])

    def _retire(self, state: State) -> None:
        # Only an entered source has work to stop; one made and never entered is dropped.
        if state.source is not None and state.entered:
            self.retired.append(state.source)
        state.source = None
        state.entered = False

    def _resolve(self, namespace: str) -> None:
        """Re-decide which definitions of `namespace` serve (see the module)."""
        states = sorted(
            self.by_namespace.get(namespace, {}).values(),
            key=lambda state: state.definition.age_order,
        )
        limit = self.platform.namespace_limits(namespace).definitions
        winners: dict[str, State] = {}
        admitted = 0
        for state in states:
            definition = state.definition
            if state.own_refusal is not None:
                state.valid = False
                state.reason, state.message = state.own_refusal
                continue  # refused by its spec or the policy: shadows nothing
            state.valid, state.shadowed_by = True, None
            admitted += 1
            state.platform = winner_of(self.precedence, definition)
            if admitted > limit:
                self._refuse(
                    state,
                    "OverLimit",
                    f"namespace {namespace} has more than {limit} definitions, the platform's "
                    "limit (the oldest are served)",
                )
                continue
            if state.platform is not None:
                self._yield(state, state.platform)
                continue
            first = winners.get(definition.metric)
            if first is not None:
                if state.reason != "Shadowed":
                    logger.info(
                        "metric definition %s/%s shadowed: %s is served by the older %s",
                        namespace,
                        definition.name,
                        definition.metric,
                        first.definition.name,
                    )
                state.shadowed_by = f"{namespace}/{first.definition.name}"
                state.reason = "Shadowed"
                state.message = (
                    f"metric {definition.metric} is served by the older definition "
                    f"{first.definition.name}"
                )
                self._retire(state)
                continue
            winners[definition.metric] = state
        refused = formula_refusals(
            (state.definition for state in winners.values()), self.platform.allows_formula_input
        )
        for metric, state in winners.items():
            if metric in refused:
                self._refuse(state, *refused[metric])
            elif state.source is None:
                self._start(state)
        for metric in self._served.pop(namespace, ()):
            self.serving.pop((namespace, metric), None)
        served = {metric for metric, state in winners.items() if state.serving}
        for metric in served:
            self.serving[(namespace, metric)] = winners[metric]
        if served:
            self._served[namespace] = served
        self._touched.add(namespace)
        self.generation += 1
        self.changed()

    def _yield(self, state: State, winner: Winner) -> None:
        definition = state.definition
        if state.reason != shadowing.REASON:
            logger.info(
                "metric definition %s/%s shadowed: %s is answered by %s",
                *definition.key,
                definition.metric,
                winner,
            )
        state.reason, state.message = shadowing.REASON, shadowing.message(definition, winner)
        self._retire(state)

    def follow_platform(self) -> None:
        """Re-decide the namespaces where the platform now wins, or no longer wins, a valid
        definition's metric, when the router in force or its `platform_generation` changed
        (see the module). O(1) when neither did."""
        precedence = self.precedence
        if precedence is None:
            return
        seen = (precedence, precedence.platform_generation)
        last = self._platform_seen
        if last is not None and last[0] is seen[0] and last[1] == seen[1]:
            return
        self._platform_seen = seen
        moved = {
            namespace
            for namespace, states in self.by_namespace.items()
            for state in states.values()
            if state.own_refusal is None
            and winner_of(precedence, state.definition) != state.platform
        }
        for namespace in sorted(moved):
            self._resolve(namespace)

    def _start(self, state: State) -> None:
        definition = state.definition
        try:
            state.source = self.makers[definition.source_type](definition, self.tools)
        except Refused as err:
            state.own_refusal = (err.reason, err.message)
            state.valid, state.reason, state.message = False, err.reason, err.message
            logger.info(
                "metric definition %s/%s refused (%s): %s", *definition.key, err.reason, err.message
            )
            return
        state.reason, state.message = "Serving", ""
        self.started.append(state)
        logger.info(
            "metric definition %s/%s serves %s %s from its %s source",
            definition.namespace,
            definition.name,
            definition.served_as.type,
            definition.metric,
            definition.source_type,
        )

    def _refuse(self, state: State, reason: str, message: str) -> None:
        state.valid, state.reason, state.message = False, reason, message
        self._retire(state)

    def check_targets(self, also: Iterable[str] = ()) -> None:
        """Refuse the serving definitions whose scrape targets take their namespace past its
        limit, oldest keeping their place, in the namespaces decided again since the last
        check and in `also` (the caller's: those whose sources' targets may have changed).
        O(serving definitions of those namespaces x log), nothing for the others: their
        definitions and targets did not change since they were last checked."""
        namespaces = self._touched
        self._touched = set()
        namespaces.update(also)
        for namespace in namespaces:
            served = self._served.get(namespace)
            if not served:
                continue
            states = sorted(
                (self.serving[(namespace, metric)] for metric in served),
                key=lambda state: state.definition.age_order,
            )
            limit = self.platform.namespace_limits(namespace).scrape_targets
            total = 0
            for state in states:
                source = state.source
                if source is None:
                    continue
                count = source.targets()
                if total + count <= limit:
                    total += count
                    continue
                self._refuse(
                    state,
                    "OverLimit",
                    f"its pods take namespace {namespace} past the platform's limit of {limit} "
                    "scrape targets",
                )
                del self.serving[(namespace, state.definition.metric)]
                served.discard(state.definition.metric)
                self.generation += 1

    # -- reads --

    def explain(self, namespace: str, metric: str) -> dict[str, object]:
        """The definitions of `metric` in `namespace`, the serving one first, each with its
        state (`?explain=1`). O(the namespace's definitions)."""
        serving = self.serving.get((namespace, metric))
        found = sorted(
            (
                state
                for state in self.by_namespace.get(namespace, {}).values()
                if state.definition.metric == metric
            ),
            key=lambda state: (state is not serving, state.definition.age_order),
        )
        return {
            "namespace": namespace,
            "servedBy": None if serving is None else serving.definition.name,
            "definitions": [state.describe() for state in found],
        }

    def listing(self) -> tuple[frozenset[MetricInfo], frozenset[str]]:
        """(custom metrics, external names) of the serving definitions; the same frozensets
        until a change. O(1), O(serving) after a change."""
        cached = self._listing
        if cached is not None and cached[0] == self.generation:
            return cached[1], cached[2]
        custom: set[MetricInfo] = set()
        external: set[str] = set()
        for (_, metric), state in self.serving.items():
            served = state.definition.served_as
            if served.type == "External":
                external.add(metric)
            elif served.type == "Pods":
                custom.add(MetricInfo(PODS, True, metric))
            elif served.workload is not None:
                custom.add(MetricInfo(served.workload[0], True, metric))
        found = (self.generation, frozenset(custom), frozenset(external))
        self._listing = found
        return found[1], found[2]
