"""One adapter from any plugin object to the server's full backend protocol.

`capabilities()` reads, once at load time, what a plugin object has: custom metrics
(`list_metrics` + `fetch`), external metrics (`list_external_metrics` + `fetch_external`), a
lifecycle, a readiness check, and whether each fetch is `async def` or a plain function. Half a
pair, or no source at all, is a load error naming the backend.

`PluginBackend` wraps the object and supplies what is missing (no lifecycle: nothing to start;
no readiness: ready once started; one source only: the other lists nothing), and guards the
server against it:

* listings: an exception, or an answer that is not a collection of the right items, is logged
  once (until the listing recovers), read as an empty listing and marks the backend not ready
  with the reason; a listing slower than `SLOW_LISTING` is logged once (it must answer from
  memory). A listing is compared by value with the last one (a plugin may change a set in
  place): O(1) for a frozenset or tuple returned again, else a C-speed copy and compare, ~20 ns
  a metric. It is checked and made a frozenset once per change, and the same frozenset returned
  while it does not change, so the router's identity check stays O(1);
* fetches: plain functions run in the backend's `BoundedThreads`; answers are checked: an
  iterable of `Sample` (`ExternalSample`), at most one per requested object (`max_series`
  series for external metrics), numbers as values. An answer that breaks this raises
  `ContractViolation` (the query layer answers a 500 naming the backend and logs why). A lazy
  iterable is read at most one item past its bound, so a runaway generator costs nothing.
  Non-finite values (NaN, infinities) are dropped: absent, as the Prometheus backend's are.
* readiness: `ready()` that raises or answers something else than a `Readiness` is not ready,
  with the reason.

Cost per fetch: the plugin's own, plus O(items) type checks (about 0.1 us per item). Over 400
lines as one piece: it is the one guard of every call into a plugin, the contract in one place.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import math
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import Any, Final, Self, TypeVar, cast

from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    ObjectRef,
    Readiness,
    Sample,
)
from custom_metrics_server.runtime.threads import BoundedThreads

__all__ = [
    "DEFAULT_MAX_SERIES",
    "DEFAULT_THREADS",
    "Capabilities",
    "ContractViolation",
    "PluginBackend",
    "PluginError",
    "capabilities",
    "failure",
    "one_line",
    "with_article",
]

#: Threads of a backend whose fetches are plain functions (the backends file's `threads`).
DEFAULT_THREADS: Final = 4
#: Series one external fetch may return (the backends file's `maxSeries`); the HPA sums them.
DEFAULT_MAX_SERIES: Final = 10_000
#: A listing slower than this is logged once: listings must answer from memory.
SLOW_LISTING: Final = 0.05

T = TypeVar("T", Sample, ExternalSample)


class PluginError(Exception):
    """A plugin cannot be loaded or started; the message names the backend (one line)."""


def with_article(name: str) -> str:
    """`a dict`, `an ExternalSample`: a type's name with its article, for the messages."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def one_line(err: BaseException) -> str:
    """`<Exception>: <first line of its message>`, for an operator's one-line error."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def failure(where: str, what: str, err: BaseException) -> PluginError:
    """`<where>: <what> failed: <Exception>: <first line>`; the traceback goes to the debug log."""
    logging.getLogger("custom_metrics_server.plugins").debug(
        "%s: %s failed", where, what, exc_info=err
    )
    return PluginError(f"{where}: {what} failed: {one_line(err)}")


class ContractViolation(TypeError):
    """A plugin answered something the contract does not allow (a bug in the plugin)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a plugin object has, read once when it is loaded."""

    custom: bool
    external: bool
    custom_async: bool
    external_async: bool
    lifecycle: bool
    readiness: bool

    def describe(self) -> str:
        """`custom (async), external (threads), lifecycle, readiness`, for the start-up log."""
        parts = []
        if self.custom:
            parts.append(f"custom ({'async' if self.custom_async else 'threads'})")
        if self.external:
            parts.append(f"external ({'async' if self.external_async else 'threads'})")
        parts += [
            name for name, has in (("lifecycle", self.lifecycle), ("ready", self.readiness)) if has
        ]
        return ", ".join(parts)


def _has(obj: object, name: str) -> bool:
    return callable(getattr(obj, name, None))


def capabilities(obj: object, *, where: str) -> Capabilities:
    """What `obj` can do; PluginError (naming `where`) when it is not a backend."""
    found = {}
    for source, listing, fetch in (
        ("custom", "list_metrics", "fetch"),
        ("external", "list_external_metrics", "fetch_external"),
    ):
        has_listing, has_fetch = _has(obj, listing), _has(obj, fetch)
        if has_listing != has_fetch:
            present, missing = (listing, fetch) if has_listing else (fetch, listing)
            raise PluginError(f"{where}: the backend has {present}() but no {missing}()")
        found[source] = has_listing
    if not found["custom"] and not found["external"]:
        raise PluginError(
            f"{where}: {type(obj).__name__} is not a backend: it needs list_metrics() + fetch() "
            "or list_external_metrics() + fetch_external() (docs/backends.md)"
        )
    enter, leave = _has(obj, "__aenter__"), _has(obj, "__aexit__")
    if enter != leave:
        raise PluginError(f"{where}: the backend has one of __aenter__/__aexit__ but not both")
    return Capabilities(
        custom=found["custom"],
        external=found["external"],
        custom_async=found["custom"] and inspect.iscoroutinefunction(obj.fetch),  # type: ignore[attr-defined]
        external_async=found["external"] and inspect.iscoroutinefunction(obj.fetch_external),  # type: ignore[attr-defined]
        lifecycle=enter,
        readiness=_has(obj, "ready"),
    )


def _valid_custom(item: object) -> MetricInfo | None:
    if isinstance(item, MetricInfo):
        return item if isinstance(item.group_resource, tuple) else None
    if isinstance(item, tuple) and len(item) == 3:
        group_resource, namespaced, metric = item
        if (
            isinstance(group_resource, tuple)
            and len(group_resource) == 2
            and all(isinstance(part, str) for part in group_resource)
            and isinstance(namespaced, bool)
            and isinstance(metric, str)
        ):
            return MetricInfo(GroupResource(*group_resource), namespaced, metric)
    return None


def _valid_external(item: object) -> str | None:
    return item if isinstance(item, str) else None


def _number(value: object) -> bool:
    """Whether `value` is a finite number the encoders render; raises for a non-number."""
    kind = type(value)
    if kind is int:
        return True
    if kind is float:
        return math.isfinite(cast("float", value))
    if kind is Decimal:
        return cast("Decimal", value).is_finite()
    raise ContractViolation(f"a value is a {kind.__name__}, not an int, float or Decimal")


_UNREAD: Final = object()
_NONE: Final[frozenset[Any]] = frozenset()


class _Listing:
    """The last valid listing of one kind (`value`), what the plugin returned (`raw`) and
    its contents then (`seen`, compared with the next), and what went wrong with it."""

    __slots__ = ("error", "raw", "seen", "value")

    def __init__(self) -> None:
        self.raw: object = _UNREAD
        self.seen: frozenset[object] | None = None
        self.value: frozenset[Any] = _NONE
        self.error = ""


class PluginBackend:
    """A plugin object seen through the full `MetricsBackend` protocol (see the module)."""

    def __init__(
        self,
        plugin: object,
        *,
        name: str,
        threads: int = DEFAULT_THREADS,
        max_series: int = DEFAULT_MAX_SERIES,
        logger: logging.Logger | None = None,
        found: Capabilities | None = None,
    ) -> None:
        self.name = name
        self.plugin = plugin
        self.capabilities = found or capabilities(plugin, where=f"backend {name!r}")
        self.max_series = max_series
        self.logger = logger or logging.getLogger(f"custom_metrics_server.backends.{name}")
        caps = self.capabilities
        needs_threads = (caps.custom and not caps.custom_async) or (
            caps.external and not caps.external_async
        )
        self.threads = BoundedThreads(threads, name=f"backend-{name}") if needs_threads else None
        self._custom = _Listing()
        self._external = _Listing()
        self._logged: set[str] = set()
        self._started = False
        self._stopped = False

    # -- listings ----------------------------------------------------------------------------

    def list_metrics(self) -> Collection[MetricInfo]:
        """The plugin's custom metrics, checked (see the module); empty while it fails, and
        before it is started (a listing may need what the start opens)."""
        if not self.capabilities.custom or not self._started:
            return _NONE
        return self._listing(self._custom, "list_metrics", _valid_custom, "MetricInfo")

    def list_external_metrics(self) -> Collection[str]:
        """The plugin's external metric names, checked; empty while it fails or not started."""
        if not self.capabilities.external or not self._started:
            return _NONE
        return self._listing(self._external, "list_external_metrics", _valid_external, "str")

    def _listing(
        self,
        listing: _Listing,
        method: str,
        valid: Callable[[object], Any],
        kind: str,
    ) -> frozenset[Any]:
        """The plugin's listing, compared by value with the last one (see the module)."""
        started = time.perf_counter()
        try:
            raw = getattr(self.plugin, method)()
            if raw is listing.raw and type(raw) in (frozenset, tuple) and not listing.error:
                return listing.value
            if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Iterable):
                raise ContractViolation(
                    f"returned {with_article(type(raw).__name__)}, not a collection"
                )
            if not isinstance(raw, Collection):  # an iterator: read once
                raw = list(raw)
            try:
                seen: frozenset[object] | None = frozenset(raw)  # the same, for a frozenset
            except TypeError:  # an unhashable item, not a valid one either: checked below
                seen = None
            if seen is not None and seen == listing.seen and not listing.error:
                listing.raw = raw
                return listing.value
            items = []
            for item in raw:
                checked = valid(item)
                if checked is None:
                    raise ContractViolation(
                        f"returned an item {item!r} that is not {with_article(kind)}"[:300]
                    )
                items.append(checked)
        except Exception as err:
            reason = f"{method}() raised {type(err).__name__}: {err}"[:300]
            if listing.error != reason:
                self.logger.error("backend %r: %s; serving no metrics from it", self.name, reason)
                self.logger.debug("backend %r: %s", self.name, method, exc_info=True)
            listing.error = reason
            listing.raw = _UNREAD
            listing.seen = None
            listing.value = _NONE
            return listing.value
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_LISTING:
            self._log_once(
                f"slow-{method}",
                "backend %r: %s() took %.0f ms; listings must answer from memory",
                self.name,
                method,
                elapsed * 1000,
            )
        if listing.error:
            self.logger.info("backend %r: %s() answers again", self.name, method)
            listing.error = ""
        listing.raw = raw
        listing.seen = seen
        value = frozenset(items)
        if value != listing.value:
            listing.value = value
        return listing.value

    def _log_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            self.logger.warning(message, *args)

    # -- fetches -----------------------------------------------------------------------------

    async def fetch(self, request: BackendRequest) -> Sequence[Sample]:
        """The plugin's samples for the request's objects, checked."""
        caps = self.capabilities
        if not caps.custom:
            return ()
        function = self.plugin.fetch  # type: ignore[attr-defined]
        answer = await self._call(function, request, caps.custom_async)
        return self._checked(answer, Sample, len(request.objects), "objects requested")

    async def fetch_external(self, request: ExternalBackendRequest) -> Sequence[ExternalSample]:
        """The plugin's series of the external metric, checked."""
        caps = self.capabilities
        if not caps.external:
            return ()
        function = self.plugin.fetch_external  # type: ignore[attr-defined]
        answer = await self._call(function, request, caps.external_async)
        return self._checked(answer, ExternalSample, self.max_series, "series allowed")

    async def _call(self, function: Callable[[Any], Any], request: object, is_async: bool) -> Any:
        if is_async:
            answer = function(request)
        else:
            assert self.threads is not None
            answer = await self.threads.run(function, request)
        if inspect.isawaitable(answer):  # a plain function that handed back a coroutine
            answer = await answer
        return answer

    @staticmethod
    def _checked(answer: object, kind: type[T], bound: int, what: str) -> Sequence[T]:
        if isinstance(answer, list | tuple):
            items: Sequence[object] = answer
            if len(items) > bound:
                raise ContractViolation(f"returned {len(items)} items for {bound} {what}")
        elif isinstance(answer, str | bytes | Mapping) or not isinstance(answer, Iterable):
            raise ContractViolation(
                f"returned {with_article(type(answer).__name__)}, not a list of {kind.__name__}"
            )
        else:
            items = list(itertools.islice(answer, bound + 1))
            if len(items) > bound:
                raise ContractViolation(f"returned more than {bound} items for {bound} {what}")
        dropped = False
        for item in items:
            if type(item) is not kind and not isinstance(item, kind):
                got, wanted = with_article(type(item).__name__), with_article(kind.__name__)
                raise ContractViolation(f"returned {got}, not {wanted}")
            if kind is Sample and not isinstance(item.described, ObjectRef):  # type: ignore[attr-defined]
                raise ContractViolation("returned a Sample whose described is not an ObjectRef")
            if not _number(item.value):
                dropped = True
        if dropped:
            return [item for item in items if _number(item.value)]  # type: ignore[attr-defined,misc]
        return items  # type: ignore[return-value]

    # -- readiness and lifecycle --------------------------------------------------------------

    def ready(self) -> Readiness:
        """Not ready before the start, after the stop, while a listing fails, or while the
        plugin's own `ready()` says so (or misbehaves)."""
        if not self._started:
            return Readiness(False, "stopped" if self._stopped else "starting")
        for listing in (self._custom, self._external):
            if listing.error:
                return Readiness(False, listing.error)
        if not self.capabilities.readiness:
            return Readiness(True)
        try:
            answer = self.plugin.ready()  # type: ignore[attr-defined]
        except Exception as err:
            return Readiness(False, f"ready() raised {type(err).__name__}: {err}"[:300])
        if not isinstance(answer, Readiness):
            return Readiness(
                False, f"ready() returned {with_article(type(answer).__name__)}, not a Readiness"
            )
        return answer

    async def __aenter__(self) -> Self:
        if self.capabilities.lifecycle:
            await self.plugin.__aenter__()  # type: ignore[attr-defined]
        self._started = True
        self._stopped = False
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._started = False
        self._stopped = True
        try:
            if self.capabilities.lifecycle:
                await self.plugin.__aexit__(exc_type, exc, tb)  # type: ignore[attr-defined]
        except Exception:
            self.logger.exception("backend %r failed to stop", self.name)
        finally:
            if self.threads is not None:
                self.threads.close()
