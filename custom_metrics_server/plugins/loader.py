"""From a backends file to backends the server can route to: types found, settings validated,
factories called, plugins adapted, routes compiled.

`load_backends()` makes every entry of a `BackendsFile` (nothing is started: the server enters
them in its lifespan). The entry that provides the cluster view is made first (`cluster:` names
it; else the first entry whose type can provide one): the others get that view in their
context. Without one, the server serves an empty in-memory view with the built-in REST mappings
(custom metrics of named objects of built-in resources only).

Every problem of every entry is collected, one line each naming the entry, and raised together
as a `PluginError` (unknown type, failed import, contract version, settings, a settings key
its model would ignore, factory, a plugin object with no source, a route). A plugin's factory
is called with its settings (the validated model instance when it has a settings model, a
read-only mapping otherwise) and, if it accepts one, `context=`.

It must not start anything or touch the event loop.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from custom_metrics_server.api.core_api import DemoCoreApi
from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import FailurePolicy, GroupResource
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi, ResourceUsageSource
from custom_metrics_server.plugins.adapter import (
    PluginBackend,
    PluginError,
    capabilities,
    failure,
)
from custom_metrics_server.plugins.builtin import Provision
from custom_metrics_server.plugins.config import (
    BackendEntry,
    BackendsFile,
    entry_label,
    settings_lines,
    unknown_settings,
)
from custom_metrics_server.plugins.registry import BackendType, find_type
from custom_metrics_server.query.routing import Host, Route
from custom_metrics_server.sdk import BackendContext, __version__, compatible
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend

__all__ = ["Built", "Loaded", "build_entry", "load_backends"]

logger = logging.getLogger(__name__)


@dataclass
class Built:
    """One entry, made: its type, its host (backend, routes, deadline) and, for a built-in,
    what it provides beside the backend."""

    entry: BackendEntry
    kind: BackendType
    host: Host
    provision: Provision | None = None

    @property
    def name(self) -> str:
        """The entry's (and the backend's) name."""
        return self.entry.name

    def same_backend(self, entry: BackendEntry) -> bool:
        """Whether `entry` makes the same backend (type, settings, threads, series bound):
        a reload then keeps this one running, even if its routes or deadline changed."""
        return (
            entry.type == self.entry.type
            and entry.settings == self.entry.settings
            and entry.threads == self.entry.threads
            and entry.max_series == self.entry.max_series
        )


@dataclass
class Loaded:
    """Everything a backends file made."""

    config: BackendsFile
    cluster: ClusterView
    built: list[Built]
    cluster_backend: str | None = None
    base_dir: Path = field(default_factory=Path.cwd)

    @property
    def hosts(self) -> list[Host]:
        """The hosts in file order (the routing order)."""
        return [built.host for built in self.built]

    def _provider(self) -> Provision | None:
        for built in self.built:
            if built.name == self.cluster_backend:
                return built.provision
        return None

    @property
    def exposition(self) -> Callable[[], Iterator[bytes]] | None:
        """The `/metrics/resources` exposition of the cluster's backend, if it has one."""
        provider = self._provider()
        return provider.exposition if provider is not None else None

    @property
    def metrics_api(self) -> ResourceMetricsApi | None:
        """The Resource Metrics API the cluster's backend offers, if any."""
        provider = self._provider()
        return provider.metrics_api if provider is not None else None

    @property
    def demo_core_api(self) -> DemoCoreApi | None:
        """The demo's `/api`, when the demo provides the cluster view."""
        provider = self._provider()
        return provider.demo_core_api if provider is not None else None

    @property
    def resource_usage(self) -> tuple[str, ResourceUsageSource] | None:
        """The first backend offering `resourceRules` usage, and that usage."""
        for built in self.built:
            if built.provision is not None and built.provision.resource_usage is not None:
                return built.name, built.provision.resource_usage
        return None

    def what(self) -> str:
        """What is served, for the start-up banner."""
        provider = self._provider()
        parts = []
        if provider is not None and provider.what:
            parts.append(provider.what)
        others = []
        for built in self.built:
            if built.name == self.cluster_backend:
                continue
            if built.provision is not None and built.provision.what:
                others.append(built.provision.what)
            else:
                others.append(f"backend {built.name} ({built.entry.type})")
        if not parts:
            return " and ".join(others) or "no backends"
        return " with ".join([parts[0], ", ".join(others)]) if others else parts[0]


def _accepts_context(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no introspection
        return False
    return any(
        p.kind is p.VAR_KEYWORD
        or (p.name == "context" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        for p in parameters
    )


def _routes(
    entry: BackendEntry, cluster: ClusterView, where: str
) -> tuple[tuple[Route, ...] | None, list[str]]:
    if entry.routes is None:
        return None, []
    routes, problems = [], []
    for index, route in enumerate(entry.routes):
        resource = None
        if route.resource is not None:
            mapping = cluster.mapping(route.resource)
            if mapping is None:
                logger.warning(
                    "%s: routes[%d]: resource %r is not known to the cluster view now; it must "
                    "be written as in request paths (pods, deployments.apps)",
                    where,
                    index,
                    route.resource,
                )
            resource = (
                mapping.group_resource
                if mapping is not None
                else GroupResource.parse(route.resource)
            )
        try:
            policy = (
                FailurePolicy(
                    absent=route.absent or "error",
                    failure=route.failure or "error",
                    max_age=route.max_age,
                    source=f"{where}: routes[{index}]",
                )
                if route.has_policy
                else None
            )
            routes.append(
                Route(
                    api=route.api,
                    resource=resource,
                    metric=route.metric,
                    metric_regex=route.metric_regex,
                    listed=route.listed,
                    policy=policy,
                    where=f"{where}: routes[{index}]",
                )
            )
        except ValueError as err:
            problems.append(f"{where}: routes[{index}]: {err}")
    return tuple(routes), problems


def build_entry(
    index: int,
    entry: BackendEntry,
    *,
    config: BackendsFile,
    cluster: ClusterView,
    base_dir: Path,
    default_timeout: float,
    kind: BackendType | None = None,
) -> Built:
    """Make one entry (see the module); PluginError with every problem of the entry."""
    where = entry_label(index, entry)
    kind = kind or find_type(entry.type, where=where)
    factory = kind.factory
    required = getattr(factory, "sdk_version", None)
    if isinstance(required, str) and not compatible(required):
        raise PluginError(
            f"{where}: written for backend contract {required}; this server provides "
            f"{__version__} (same major, not a newer minor)"
        )
    routes, problems = _routes(entry, cluster, where)
    if kind.yields and routes is not None:  # a route would win over the others' listings
        problems.append(f"{where}: a {entry.type} backend takes no routes {_YIELDS}")
    model = getattr(factory, "settings_model", None)
    settings: object = MappingProxyType(dict(entry.settings))
    if model is not None:
        try:
            settings = model.model_validate(entry.settings)
        except ValidationError as err:
            problems += settings_lines(err, where)
            problems += unknown_settings(model, entry.settings, where)
        except Exception as err:
            problems.append(str(failure(where, "validating settings", err)))
        else:
            problems += unknown_settings(model, entry.settings, where, validated=settings)
    if problems:
        raise PluginError("\n".join(problems))
    defaults = config.defaults
    timeout = entry.timeout if entry.timeout is not None else defaults.timeout
    context = BackendContext(
        name=entry.name,
        cluster=cluster,
        logger=logging.getLogger(f"custom_metrics_server.backends.{entry.name}"),
        timeout=timeout if timeout is not None else default_timeout,
        base_dir=base_dir,
    )
    try:
        made = (
            factory(settings, context=context) if _accepts_context(factory) else factory(settings)
        )
    except Exception as err:
        raise failure(where, "making the backend", err) from err
    provision = made if isinstance(made, Provision) else None
    backend: MetricsBackend
    if provision is not None:
        backend = provision.backend
    elif kind.builtin:
        backend = made
    else:
        backend = PluginBackend(
            made,
            found=capabilities(made, where=where),
            name=entry.name,
            threads=entry.threads or defaults.threads,
            max_series=entry.max_series or defaults.max_series,
            logger=context.logger,
        )
        logger.info("backend %s: %s, %s", entry.name, kind.origin, backend.capabilities.describe())
    host = Host(
        backend=backend,
        routes=routes,
        timeout=timeout,
        dynamic=kind.dynamic,
        yields=kind.yields,
        gates_readiness=_gates(entry, kind),
    )
    return Built(entry=entry, kind=kind, host=host, provision=provision)


_YIELDS = "(it answers only what no other backend routes or lists)"


def _gates(entry: BackendEntry, kind: BackendType) -> bool:
    return entry.gates_readiness if entry.gates_readiness is not None else kind.gates


def load_backends(
    config: BackendsFile,
    *,
    base_dir: Path,
    default_timeout: float,
    keep: Mapping[str, Built] | None = None,
    cluster: ClusterView | None = None,
) -> Loaded:
    """Make every entry (see the module). With `keep` (a reload), an entry that makes the
    same backend as a kept one reuses it (with the new routes and deadline) instead of making
    a new one; `cluster` is then the view in force."""
    problems: list[str] = []
    causes: list[BaseException] = []  # what a problem came from (the CLI names a single one)
    kinds: dict[int, BackendType] = {}
    for index, entry in enumerate(config.backends):
        if keep and entry.name in keep and keep[entry.name].same_backend(entry):
            kinds[index] = keep[entry.name].kind
            continue
        try:
            kinds[index] = find_type(entry.type, where=entry_label(index, entry))
        except PluginError as err:
            problems.append(str(err))
    provider = _provider_index(config, kinds, problems)
    built: dict[int, Built] = {}
    order = [provider] if provider is not None else []
    order += [i for i in range(len(config.backends)) if i != provider]
    view: ClusterView | None = cluster
    for index in order:
        entry = config.backends[index]
        kept = keep.get(entry.name) if keep else None
        if index not in kinds:
            continue  # its type was not found (reported)
        if kept is not None and kept.same_backend(entry):
            routes, route_problems = _routes(
                entry, view or InMemoryCluster(), entry_label(index, entry)
            )
            problems += route_problems
            timeout = entry.timeout if entry.timeout is not None else config.defaults.timeout
            gates = _gates(entry, kept.kind)
            host = replace(kept.host, routes=routes, timeout=timeout, gates_readiness=gates)
            built[index] = Built(entry=entry, kind=kept.kind, host=host, provision=kept.provision)
        else:
            try:
                built[index] = build_entry(
                    index,
                    entry,
                    config=config,
                    cluster=view or InMemoryCluster(),
                    base_dir=base_dir,
                    default_timeout=default_timeout,
                    kind=kinds[index],
                )
            except PluginError as err:
                problems.append(str(err))
                if err.__cause__ is not None:
                    causes.append(err.__cause__)
                continue
        if index == provider and view is None:
            provision = built[index].provision
            view = provision.cluster if provision is not None else None
    if problems:
        error = PluginError("\n".join(problems))
        if len(problems) == 1 and len(causes) == 1:
            raise error from causes[0]
        raise error
    if view is None:
        logger.info(
            "no backend provides a cluster view: serving the built-in resources' REST mappings "
            "with no objects (custom metrics of named objects only)"
        )
        view = InMemoryCluster()
    return Loaded(
        config=config,
        cluster=view,
        built=[built[i] for i in range(len(config.backends))],
        cluster_backend=config.backends[provider].name if provider is not None else None,
        base_dir=base_dir,
    )


def _provider_index(
    config: BackendsFile, kinds: Mapping[int, BackendType], problems: list[str]
) -> int | None:
    if config.cluster is not None:
        for index, entry in enumerate(config.backends):
            if entry.name == config.cluster:
                kind = kinds.get(index)
                if kind is not None and not kind.cluster:
                    problems.append(
                        f"cluster: backend {entry.name!r} (type {entry.type}) provides no "
                        "cluster view (kubernetes, demo and fixture do)"
                    )
                return index
    for index in range(len(config.backends)):
        kind = kinds.get(index)
        if kind is not None and kind.cluster:
            return index
    return None
