"""Where a backend type's factory comes from, looked up by the `type:` of a backends file entry.

In this order:

1. a **built-in** name (`BUILTIN_TYPES`): reserved, resolved from the table below, so a server
   started from a source tree whose package metadata is stale still finds its own types;
2. an **entry point** of the group `custom_metrics_server.backends` (a plugin package's
   `[project.entry-points."custom_metrics_server.backends"]`);
3. `package.module:factory`: a factory importable by that path (a plugin that is not packaged,
   a test double).

A plugin that fails to import is a `PluginError` naming the entry, the plugin and the exception
in one line (the traceback is logged at debug level).

Cost: the entry point scan (reading installed packages' metadata) runs only for a type that is
not built in; an import runs once per type.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from custom_metrics_server.plugins.adapter import PluginError, failure

__all__ = ["BUILTIN_TYPES", "ENTRY_POINT_GROUP", "BackendType", "find_type", "installed_types"]

ENTRY_POINT_GROUP: Final = "custom_metrics_server.backends"


@dataclass(frozen=True, slots=True)
class _Builtin:
    target: str
    #: its listing is discovered at run time (a conflict with it warns, never fails start-up)
    dynamic: bool = False
    #: it can provide the cluster view the server serves
    cluster: bool = False
    #: its readiness gates `/readyz` unless the entry says otherwise
    gates: bool = True
    #: it yields to every other backend (`query.routes.Host.yields`)
    yields: bool = False


#: The built-in types. Other built-ins register here the same way.
BUILTIN_TYPES: Final[dict[str, _Builtin]] = {
    "kubernetes": _Builtin("custom_metrics_server.plugins.builtin:kubernetes", cluster=True),
    "prometheus": _Builtin("custom_metrics_server.plugins.builtin:prometheus", dynamic=True),
    "demo": _Builtin("custom_metrics_server.plugins.builtin:demo", cluster=True),
    "simulated": _Builtin("custom_metrics_server.plugins.builtin:demo", cluster=True),
    "fixture": _Builtin("custom_metrics_server.plugins.builtin:fixture", cluster=True),
    "memory": _Builtin("custom_metrics_server.plugins.builtin:fixture", cluster=True),
    "pod-metrics": _Builtin(
        "custom_metrics_server.plugins.builtin_remote:pod_metrics", dynamic=True
    ),
    # An upstream that is down fails its own metrics (503), not the whole replica.
    "passthrough": _Builtin(
        "custom_metrics_server.plugins.builtin_remote:passthrough", dynamic=True, gates=False
    ),
    # Application teams' MetricDefinitions: the platform's backends win over them, and their
    # watch not syncing (the CRD not installed) fails their own metrics, not the replica.
    "metric-definitions": _Builtin(
        "custom_metrics_server.plugins.builtin_definitions:metric_definitions",
        dynamic=True,
        gates=False,
        yields=True,
    ),
}


@dataclass(frozen=True, slots=True)
class BackendType:
    """A backend type, found: its factory and where it came from."""

    name: str
    factory: Callable[..., Any]
    origin: str
    builtin: bool = False
    dynamic: bool = False
    cluster: bool = False
    gates: bool = False
    yields: bool = False


def _import(target: str) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    module = importlib.import_module(module_name)
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"{target} is a {type(found).__name__}, not a factory")
    return found  # type: ignore[no-any-return]


def installed_types() -> list[str]:
    """Names of the installed plugins' entry points (for messages)."""
    return sorted(
        {point.name for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    )


def find_type(name: str, *, where: str) -> BackendType:
    """The type `name` (see the module); PluginError naming `where` when it is unknown or
    cannot be imported."""
    builtin = BUILTIN_TYPES.get(name)
    if builtin is not None:
        try:
            made = _import(builtin.target)
        except Exception as err:  # pragma: no cover - a broken installation
            raise failure(where, f"importing the built-in type {name!r}", err) from err
        return BackendType(
            name,
            made,
            "built-in",
            builtin=True,
            dynamic=builtin.dynamic,
            cluster=builtin.cluster,
            gates=builtin.gates,
            yields=builtin.yields,
        )
    points = [
        point
        for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if point.name == name
    ]
    if len(points) > 1:
        sources = ", ".join(sorted(f"{p.value} ({_distribution(p)})" for p in points))
        raise PluginError(f"{where}: several plugins are named {name!r}: {sources}")
    if points:
        point = points[0]
        origin = f"plugin {name} = {point.value} ({_distribution(point)})"
        try:
            loaded = point.load()
        except Exception as err:
            raise failure(where, f"importing {origin}", err) from err
        if not callable(loaded):
            raise PluginError(f"{where}: {origin} is a {type(loaded).__name__}, not a factory")
        return BackendType(name, loaded, origin)
    if ":" in name:
        try:
            return BackendType(name, _import(name), f"factory {name}")
        except Exception as err:
            raise failure(where, f"importing {name}", err) from err
    known = ", ".join(sorted(BUILTIN_TYPES))
    plugins = ", ".join(installed_types()) or "none"
    raise PluginError(
        f"{where}: no backend type {name!r} (built-in: {known}; installed plugins: {plugins}; "
        "or give package.module:factory)"
    )


def _distribution(point: importlib.metadata.EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "unknown distribution"
