"""The CRI client: ``runtime.v1.RuntimeService`` over the runtime's unix socket (grpc.aio).

One channel for the agent's lifetime. gRPC reconnects it by itself when the socket goes away
or the runtime restarts, with exponential backoff (``initial_backoff`` doubling up to
``max_backoff``); calls never wait for a connection (``wait_for_ready`` off) and each has its
own deadline (``timeout``), so a dead runtime costs a scrape one fast ``UNAVAILABLE`` instead
of a hang. :meth:`RuntimeClient.pods` makes three calls per collection (sandboxes, containers,
sandbox stats, concurrently), or ``ListContainerStats`` after the first two when the
runtime does not implement ``ListPodSandboxStats`` (remembered after the first
``UNIMPLEMENTED``) or is a release that the call can crash (containerd 1.6.0-1.6.21:
:attr:`RuntimeVersion.racy_sandbox_stats`, known from ``Version`` before the first
collection). Responses may be up to 16 MiB, the kubelet's limit.

One dead sandbox costs only its own figures. containerd 1.6 answers ``ListPodSandboxStats``
with ``UNKNOWN: failed to obtain metrics for sandbox "<id>": failed to load sandbox cgroup
...: cgroups: cgroup deleted`` for as long as a NOTREADY sandbox whose cgroup is gone is
still listed (30-60 s after a pod is deleted, until the kubelet removes it). When the runtime
*answers* the list with an error (any code but ``UNIMPLEMENTED``, ``UNAVAILABLE``,
``DEADLINE_EXCEEDED`` and ``CANCELLED``, which say it did not answer), the collection asks
``ListPodSandboxStats`` again once per ready sandbox, filtered by its id (``_PER_SANDBOX``
calls at once; containerd 1.6 honours the filter, seen on a real node, and CRI-O's
server filters by id too), and leaves out only the
sandboxes whose own call fails. The list is tried first in every collection, so the agent
goes back to one call as soon as the runtime does. Cost of a degraded collection: one call
per ready sandbox.

Failures raise :class:`~..scraping.failure.ScrapeFailure` (the kubelet scraper's
failure too) with a short reason for counting; the last outcome is kept for ``/healthz``.
Log lines say which happened: the runtime does not answer, or it answered with an error.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Self, TypeVar

import grpc
from grpc import aio

from custom_metrics_server.kubelet_format.summary import PodStats
from custom_metrics_server.node_agent.cri import api_pb2 as cri
from custom_metrics_server.node_agent.cri import api_pb2_grpc as cri_grpc
from custom_metrics_server.node_agent.cri_stats import (
    pods_from_container_stats,
    pods_from_sandbox_stats,
)
from custom_metrics_server.scraping.failure import ScrapeFailure

__all__ = [
    "CRI_API_VERSION",
    "RuntimeClient",
    "RuntimeVersion",
    "grpc_target",
]

logger = logging.getLogger(__name__)

#: What ``Version`` is asked with (the kubelet sends its CRI API version).
CRI_API_VERSION: Final = "v1"
MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
#: Per-sandbox stats calls in flight at once while the list fails (see the module).
_PER_SANDBOX: Final = 8
#: Codes that mean the runtime did not answer (as opposed to answering with an error).
_SILENT: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    }
)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class RuntimeVersion:
    """The runtime's answer to ``Version``."""

    runtime_name: str
    runtime_version: str
    runtime_api_version: str

    @property
    def racy_sandbox_stats(self) -> bool:
        """Whether ``ListPodSandboxStats`` may crash this runtime: containerd 1.6.0-1.6.21
        writes its sandbox store under a read lock while it answers (containerd#8130, fixed in
        1.6.22), so a concurrent read of that store, such as the kubelet's PLEG listing the
        sandboxes every second, can end the whole runtime with ``fatal error: concurrent map
        iteration and map write`` (seen with Debian 12's 1.6.20 on a real node)."""
        if self.runtime_name != "containerd":
            return False
        found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", self.runtime_version)
        if found is None:
            return False
        major, minor, patch = (int(part) for part in found.groups())
        return (major, minor) == (1, 6) and patch < 22


def grpc_target(endpoint: str) -> str:
    """A gRPC target from a kubelet-style ``--container-runtime-endpoint``."""
    if endpoint.startswith("unix://"):
        return endpoint
    if endpoint.startswith("/"):
        return f"unix://{endpoint}"
    raise ValueError(f"unsupported CRI endpoint {endpoint!r}: want unix:///path/to.sock")


def _reason(code: grpc.StatusCode) -> str:
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "deadline"
    if code == grpc.StatusCode.UNAVAILABLE:
        return "unavailable"
    return str(code.name).lower()


def _unwrap(answer: _T | BaseException) -> _T:
    """An answer of ``gather(..., return_exceptions=True)``, raising it if it is an error."""
    if isinstance(answer, BaseException):
        raise answer
    return answer


class RuntimeClient:
    """CRI calls with deadlines; use as ``async with`` (opens and closes the channel)."""

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 2.0,
        initial_backoff: float = 0.2,
        max_backoff: float = 5.0,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.endpoint = endpoint
        self.timeout = timeout
        self._target = grpc_target(endpoint)
        self._options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", int(initial_backoff * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(initial_backoff * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(max_backoff * 1000)),
        ]
        self._channel: aio.Channel | None = None
        self._stub: cri_grpc.RuntimeServiceAsyncStub | None = None
        #: until the runtime says UNIMPLEMENTED, or its version is one ListPodSandboxStats
        #: can crash (`RuntimeVersion.racy_sandbox_stats`)
        self._sandbox_stats = True
        self._version: RuntimeVersion | None = None
        self.last_error: ScrapeFailure | None = None
        #: the list's error while collections ask sandbox by sandbox (None: the list answers)
        self.list_error: str | None = None
        self.calls = 0
        self.failures = 0
        #: sandboxes left out of collections because their own stats call failed
        self.sandboxes_skipped = 0

    async def __aenter__(self) -> Self:
        self._channel = aio.insecure_channel(self._target, options=self._options)
        self._stub = cri_grpc.RuntimeServiceStub(self._channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = None
        self._stub = None

    @property
    def stub(self) -> cri_grpc.RuntimeServiceAsyncStub:
        """The generated stub (only while entered)."""
        if self._stub is None:
            raise RuntimeError("RuntimeClient is not open (use `async with`)")
        return self._stub

    def _failed(self, what: str, err: aio.AioRpcError) -> ScrapeFailure:
        failure = ScrapeFailure(
            _reason(err.code()), f"{what} on {self.endpoint}: {err.code().name}: {err.details()}"
        )
        self.failures += 1
        if self.last_error is None:
            if err.code() in _SILENT:
                logger.warning("the container runtime does not answer: %s", failure.message)
            else:
                logger.warning("the container runtime answered with an error: %s", failure.message)
        self.last_error = failure
        return failure

    def _succeeded(self) -> None:
        if self.last_error is not None:
            logger.info("the container runtime answers again on %s", self.endpoint)
        self.last_error = None

    async def version(self) -> RuntimeVersion:
        """``Version``: the runtime's name and versions."""
        self.calls += 1
        try:
            answer = await self.stub.Version(
                cri.VersionRequest(version=CRI_API_VERSION), timeout=self.timeout
            )
        except aio.AioRpcError as err:
            raise self._failed("Version", err) from err
        self._succeeded()
        version = RuntimeVersion(
            answer.runtime_name, answer.runtime_version, answer.runtime_api_version
        )
        if self._version is None and version.racy_sandbox_stats:
            logger.warning(
                "%s %s can crash when ListPodSandboxStats meets another reader of its sandbox "
                "store (containerd#8130, fixed in 1.6.22): using ListContainerStats instead "
                "(pod totals are sums over containers, without the pause container)",
                version.runtime_name,
                version.runtime_version,
            )
            self._sandbox_stats = False
        self._version = version
        return version

    async def pods(self) -> tuple[PodStats, ...]:
        """Every ready pod with its running containers' stats (see :mod:`.cri_stats`)."""
        if self._version is None:  # which stats calls are safe depends on it
            await self.version()
        self.calls += 1
        stub, timeout = self.stub, self.timeout
        ready = cri.PodSandboxFilter(state=cri.PodSandboxStateValue(state=cri.SANDBOX_READY))
        running = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING))
        try:
            if self._sandbox_stats:
                sandbox_answer, container_answer, stats = await asyncio.gather(
                    stub.ListPodSandbox(cri.ListPodSandboxRequest(filter=ready), timeout=timeout),
                    stub.ListContainers(cri.ListContainersRequest(filter=running), timeout=timeout),
                    stub.ListPodSandboxStats(cri.ListPodSandboxStatsRequest(), timeout=timeout),
                    return_exceptions=True,
                )
                sandboxes, containers = _unwrap(sandbox_answer), _unwrap(container_answer)
                if not isinstance(stats, BaseException):
                    self._list_answers()
                    self._succeeded()
                    return pods_from_sandbox_stats(
                        sandboxes.items, containers.containers, stats.stats
                    )
                if not isinstance(stats, aio.AioRpcError) or stats.code() in _SILENT:
                    raise stats
                if stats.code() != grpc.StatusCode.UNIMPLEMENTED:
                    found = await self._each_sandbox(sandboxes.items, stats)
                    self._succeeded()
                    return pods_from_sandbox_stats(sandboxes.items, containers.containers, found)
                logger.info(
                    "the runtime has no ListPodSandboxStats; using ListContainerStats "
                    "(pod totals are sums over containers)"
                )
                self._sandbox_stats = False
            else:
                sandboxes, containers = await asyncio.gather(
                    stub.ListPodSandbox(cri.ListPodSandboxRequest(filter=ready), timeout=timeout),
                    stub.ListContainers(cri.ListContainersRequest(filter=running), timeout=timeout),
                )
            container_stats = await stub.ListContainerStats(
                cri.ListContainerStatsRequest(), timeout=timeout
            )
        except aio.AioRpcError as err:
            raise self._failed("listing stats", err) from err
        self._succeeded()
        return pods_from_container_stats(
            sandboxes.items, containers.containers, container_stats.stats
        )

    def _list_answers(self) -> None:
        if self.list_error is not None:
            logger.info(
                "the container runtime answers ListPodSandboxStats again on %s: one call per "
                "collection",
                self.endpoint,
            )
        self.list_error = None

    async def _each_sandbox(
        self, sandboxes: Sequence[cri.PodSandbox], err: aio.AioRpcError
    ) -> list[cri.PodSandboxStats]:
        """The stats of each ready sandbox, asked one by one (``_PER_SANDBOX`` at once) after
        the list failed with ``err``; a sandbox whose call fails is left out. Raises the
        error of a call the runtime did not answer. O(sandboxes) calls."""
        message = f"{err.code().name}: {err.details()}"
        if self.list_error is None:
            logger.warning(
                "the container runtime answered ListPodSandboxStats with an error (%s); "
                "asking each of the %d ready sandboxes on its own while it does, so only "
                "the sandbox at fault goes without figures",
                message,
                len(sandboxes),
            )
        self.list_error = message
        gate = asyncio.Semaphore(_PER_SANDBOX)
        stub, timeout = self.stub, self.timeout

        async def one(sandbox: cri.PodSandbox) -> cri.ListPodSandboxStatsResponse:
            request = cri.ListPodSandboxStatsRequest(
                filter=cri.PodSandboxStatsFilter(id=sandbox.id)
            )
            async with gate:
                return await stub.ListPodSandboxStats(request, timeout=timeout)

        answers = await asyncio.gather(*(one(s) for s in sandboxes), return_exceptions=True)
        found: list[cri.PodSandboxStats] = []
        for sandbox, answer in zip(sandboxes, answers, strict=True):
            if isinstance(answer, aio.AioRpcError) and answer.code() not in _SILENT:
                self.sandboxes_skipped += 1
                logger.debug(
                    "no stats for sandbox %s (%s/%s): %s: %s",
                    sandbox.id,
                    sandbox.metadata.namespace,
                    sandbox.metadata.name,
                    answer.code().name,
                    answer.details(),
                )
                continue
            found.extend(_unwrap(answer).stats)
        return found
