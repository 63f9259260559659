"""Typing test of the public SDK, checked by `make typecheck` (mypy --strict, unused ignores
are errors): what a stranger writes must type-check against the protocols, and what breaks the
contract must not. Never imported by pytest."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from pydantic import BaseModel

from custom_metrics_server import sdk
from custom_metrics_server.backends.memory import MemoryBackend


class OnlyExternal:
    """Synchronous, external metrics only, no lifecycle, no readiness."""

    def list_external_metrics(self) -> list[str]:
        return ["queue_depth"]

    def fetch_external(self, request: sdk.ExternalBackendRequest) -> list[sdk.ExternalSample]:
        return [sdk.external_sample(request, 3, labels={"queue": "a"})]


class AsyncCustom:
    """Asynchronous custom metrics with a lifecycle and readiness."""

    def __init__(self) -> None:
        self.started = False

    def list_metrics(self) -> frozenset[sdk.MetricInfo]:
        return frozenset({sdk.MetricInfo(sdk.GroupResource("apps", "deployments"), True, "x")})

    async def fetch(self, request: sdk.BackendRequest) -> Sequence[sdk.Sample]:
        await asyncio.sleep(0)
        return [sdk.sample(request, key, 1.5, window=60) for key in request.objects]

    def ready(self) -> sdk.Readiness:
        return sdk.Readiness(self.started, "" if self.started else "connecting")

    async def __aenter__(self) -> Self:
        self.started = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.started = False


class Settings(BaseModel):
    dsn: str


@sdk.factory(settings=Settings, requires="1.0")
def make(settings: Settings, *, context: sdk.BackendContext) -> AsyncCustom:
    context.logger.info("making %s for %s", context.name, settings.dsn)
    return AsyncCustom()


external: sdk.ExternalMetricsSource = OnlyExternal()
custom: sdk.CustomMetricsSource = AsyncCustom()
lifecycle: sdk.Lifecycle = AsyncCustom()
readiness: sdk.ReadinessCheck = AsyncCustom()

# What breaks the contract does not type-check (an unneeded ignore would fail mypy).
not_custom: sdk.CustomMetricsSource = OnlyExternal()  # type: ignore[assignment]
no_lifecycle: sdk.Lifecycle = OnlyExternal()  # type: ignore[assignment]
not_full: sdk.MetricsBackend = AsyncCustom()  # type: ignore[assignment]


def built_in_backends_are_full_backends() -> None:
    """The built-in backends implement the whole protocol (the server hosts them unadapted)."""
    full: sdk.MetricsBackend = MemoryBackend()
    also_custom: sdk.CustomMetricsSource = full
    also_external: sdk.ExternalMetricsSource = full
    del also_custom, also_external


def selector_helpers_type_as_documented(selector: sdk.Selector) -> str | None:
    """Contract 1.2's selector helpers, as a plugin turns a selector into a query."""
    terms: list[tuple[str, frozenset[str]]] = selector.equality_terms()
    shown: str = str(selector)
    as_object: dict[str, object] = selector.to_label_selector()
    del terms, shown, as_object
    return selector.requires_exact("queue")


def a_test_context_is_a_backend_context() -> sdk.BackendContext:
    """`testing.context` builds what a factory's `context=` gets."""
    from custom_metrics_server.testing.context import backend_context  # noqa: PLC0415

    return backend_context("jobs", objects=[{"resource": "pods", "namespace": "a", "name": "p"}])
