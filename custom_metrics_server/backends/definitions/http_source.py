"""The `http` source: a number from the JSON body of a GET to a Service of the definition's
namespace, sent only to that Service's own ready endpoints (docs/metric-definitions.md,
"Source `http`"), on `http_json.py`.

Per definition, subscriptions to two shared list+watches of **its namespace only**
(`watched.SERVICES`, `/api/v1/namespaces/<ns>/services`, and `watched.ENDPOINTSLICES`,
`/apis/discovery.k8s.io/v1/namespaces/<ns>/endpointslices`: one of each for every `http`
definition of the namespace), so the addresses can come from no other namespace; of them the
source keeps its Service (by name) and that Service's slices (label
`kubernetes.io/service-name`), matched on the client. Each `interval`,
`http_json.ready_targets` picks the ready, non-terminating endpoints at the slice port carrying
the named Service port (loopback, link-local, unspecified and multicast addresses skipped),
`choose` takes one by turn, and
`fetch_value` GETs it with no credentials, redirects refused, the body and the deadline capped
by the platform's `http` settings. No ready endpoint, a failed GET, no number at `valuePath`:
the source's error.

Cost: the namespace's Services and EndpointSlices watched once (shared; an event O(1) per
`http` definition of the namespace); a refresh O(endpoints) and one GET.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

from custom_metrics_server.backends.definitions.http_json import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_BODY,
    choose,
    fetch_value,
    ready_targets,
)
from custom_metrics_server.backends.definitions.polled import Polled
from custom_metrics_server.backends.definitions.source import SourceError, SourceTools, Value
from custom_metrics_server.backends.definitions.spec import Definition, Refused
from custom_metrics_server.backends.definitions.watched import (
    ENDPOINTSLICES,
    SERVICES,
    subscriptions,
)
from custom_metrics_server.kube.keyed_sink import KeyedSink, name_of
from custom_metrics_server.kube.shared_watches import Subscriptions

__all__ = ["HttpSettings", "HttpSource", "make_http"]

_SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The platform's caps on `http` sources."""

    deadline: float = DEFAULT_DEADLINE
    max_body: int = DEFAULT_MAX_BODY
    #: endpoints at loopback addresses are used: unit tests only, not a platform setting (the
    #: API server refuses loopback addresses in EndpointSlices anyway)
    allow_loopback: bool = False


class _Objects(KeyedSink[str]):
    """The `WatchSink` of one collection: the objects `keep` chooses, by name, as the API
    serves them (one that stops being chosen is forgotten)."""

    def __init__(self, keep: Callable[[Mapping[str, Any]], bool]) -> None:
        super().__init__()
        self.keep = keep
        self.by_name: dict[str, Mapping[str, Any]] = {}

    def apply(self, obj: Mapping[str, Any]) -> str | None:
        name = name_of(obj)
        if name is None:
            return None
        if not self.keep(obj):
            self.by_name.pop(name, None)
            return None
        self.by_name[name] = obj
        return name

    def remove(self, key: str) -> None:
        self.by_name.pop(key, None)

    def keys(self) -> Iterable[str]:
        return self.by_name.keys()

    def key_of(self, obj: Mapping[str, Any]) -> str | None:
        return name_of(obj)


class HttpSource(Polled):
    """One definition's Service endpoint, read (see the module)."""

    def __init__(
        self,
        definition: Definition,
        spec: tuple[str, int | str, str, str],
        watches: Subscriptions,
        settings: HttpSettings,
    ) -> None:
        super().__init__(definition.interval)
        self.namespace = definition.namespace
        self.service, self.port, self.path, self.value_path = spec
        self.settings = settings
        self.services = _Objects(lambda obj: name_of(obj) == self.service)
        self.slices = _Objects(lambda obj: _labels(obj).get(_SERVICE_NAME_LABEL) == self.service)
        name = f"mdef-{self.namespace}-{definition.name}"
        self.watches = watches
        watches.add(SERVICES, self.services, name=f"{name}-service")
        watches.add(ENDPOINTSLICES, self.slices, name=f"{name}-endpointslices")
        self._turn = 0

    async def __aenter__(self) -> Self:
        await self.watches.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.watches.__aexit__(exc_type, exc, tb)

    async def read(self) -> list[Value]:
        """One GET to the next ready endpoint; its number."""
        unlisted = await self.watches.wait_synced(self.settings.deadline)
        if unlisted is not None:
            raise SourceError(f"the Service's objects are not listed yet ({unlisted})")
        service = self.services.by_name.get(self.service)
        if service is None:
            raise SourceError(f"no Service {self.service} in namespace {self.namespace}")
        targets = ready_targets(
            service,
            self.slices.by_name.values(),
            self.port,
            allow_loopback=self.settings.allow_loopback,
        )
        if isinstance(targets, str):
            raise SourceError(targets)
        target = choose(targets, self._turn)
        self._turn += 1
        found = await fetch_value(
            target,
            service=self.service,
            namespace=self.namespace,
            path=self.path,
            value_path=self.value_path,
            deadline=self.settings.deadline,
            max_body=self.settings.max_body,
        )
        if isinstance(found, str):
            raise SourceError(found)
        return [Value(found, self.clock())]

    def targets(self) -> int:
        """One endpoint read per interval, counted against the namespace's scrape targets."""
        return 1


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def make_http(definition: Definition, tools: SourceTools) -> HttpSource:
    """The `SourceMaker` of `HTTP`."""
    spec = definition.source_spec
    service, port = spec.get("service"), spec.get("port")
    path, value_path = spec.get("path"), spec.get("valuePath")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if not isinstance(service, str) or not service:
        raise Refused("InvalidSpec", "spec.source.http.service is required")
    if isinstance(port, bool) or not isinstance(port, int | str) or port in ("", 0):
        raise Refused("InvalidPort", f"spec.source.http.port: {port!r} is not a port")
    if not isinstance(path, str) or not path.startswith("/"):
        raise Refused("InvalidPath", f"spec.source.http.path: {path!r} does not start with /")
    if not isinstance(value_path, str) or not value_path:
        raise Refused("InvalidSpec", "spec.source.http.valuePath is required")
    settings = tools.settings.get("http")
    if not isinstance(settings, HttpSettings):
        settings = HttpSettings()
    watches = subscriptions(tools, definition.namespace)
    return HttpSource(definition, (service, port, path, value_path), watches, settings)
