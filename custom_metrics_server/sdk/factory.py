"""How a plugin is made: a factory, named by an entry point, called with the backend's settings.

    [project.entry-points."custom_metrics_server.backends"]
    jobs = "jobs_backend:make"

`make(settings)` or `make(settings, *, context)` returns the backend object. `settings` is the
backend's `settings:` mapping from the backends file (read-only) or, when the factory carries a
settings model (`@factory(settings=Model)`: any pydantic model class, or any class with a
`model_validate` class method), the validated model instance. `context` (keyword-only, passed
only when the factory accepts it) is a `BackendContext`.

PURE: no I/O (the decorator only marks the function).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from custom_metrics_server.sdk.backend import ClusterView
from custom_metrics_server.sdk.version import __version__, parse_version

__all__ = ["BackendContext", "factory"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendContext:
    """What the server tells a factory about the backend it makes."""

    #: The backend's `name` in the backends file (unique; in logs, errors, `/readyz`, metrics).
    name: str
    #: The server's cluster view: REST mappings and the objects of each resource, with labels.
    cluster: ClusterView
    #: `custom_metrics_server.backends.<name>`: log through it so operators find the records.
    logger: logging.Logger
    #: The deadline of one fetch in seconds (the server cancels the call then: 504).
    timeout: float
    #: The directory of the backends file: resolve relative paths in settings against it.
    base_dir: Path


def factory(*, settings: type | None = None, requires: str = __version__) -> Callable[[F], F]:
    """Mark a backend factory: `settings` validates the backend's `settings:` mapping (a
    pydantic model; errors name the backend and the field); `requires` is the contract
    version the plugin was written against (refused by a server with another major version
    or an older minor one)."""
    parse_version(requires)
    if settings is not None and not callable(getattr(settings, "model_validate", None)):
        raise TypeError(f"settings must be a pydantic model class, not {settings!r}")

    def mark(function: F) -> F:
        # Plain attributes, read by the loader: a factory needs no base class or registry.
        function.settings_model = settings  # type: ignore[attr-defined]
        function.sdk_version = requires  # type: ignore[attr-defined]
        return function

    return mark
