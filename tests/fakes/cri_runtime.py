"""A container runtime's CRI stats service for tests: a real grpc.aio server on a unix socket
implementing ``Version``, ``ListPodSandbox``, ``ListContainers``, ``ListPodSandboxStats`` and
``ListContainerStats`` from the generated servicer, over a world built from :class:`Summary`
values (:func:`world_from_summary`), so tests know every value and timestamp it answers.

Switches: ``sandbox_stats_unimplemented`` (a runtime without ``ListPodSandboxStats``),
``fail_with`` (every call fails with that status), ``delay`` (seconds before answering), and
:meth:`FakeCriRuntime.delete_pod` (a pod deleted on containerd 1.6: see ``CGROUP_DELETED``).
Filters are honoured as the runtimes honour them (state, id, sandbox id).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import grpc
from grpc import aio

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    PodStats,
    Summary,
    SwapStats,
)
from custom_metrics_server.node_agent.cri import api_pb2 as cri
from custom_metrics_server.node_agent.cri import api_pb2_grpc as cri_grpc
from custom_metrics_server.node_agent.cri_stats import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
)

#: containerd 1.6.20's answer to an unfiltered ``ListPodSandboxStats`` while a NOTREADY sandbox
#: whose cgroup is gone is still listed (the 30-60 s after a pod is deleted until the kubelet
#: removes the sandbox), code ``UNKNOWN``, as seen on the realnode (docs/node-agent.md).
#: Filtered by that sandbox's id, the call answers no stats; by another id, that one's.
CGROUP_DELETED = (
    'failed to obtain metrics for sandbox "{id}": failed to load sandbox cgroup '
    "/kubepods/besteffort/pod{uid}: cgroups: cgroup deleted"
)


def _u64(value: int | None) -> cri.UInt64Value | None:
    return None if value is None else cri.UInt64Value(value=value)


def _cpu(stats: CpuStats | None, windows: bool) -> Any:
    if stats is None:
        return None
    kind = cri.WindowsCpuUsage if windows else cri.CpuUsage
    return kind(timestamp=stats.time_ns, usage_core_nano_seconds=_u64(stats.usage_core_nanoseconds))


def _memory(stats: MemoryStats | None, windows: bool) -> Any:
    if stats is None:
        return None
    if windows:
        return cri.WindowsMemoryUsage(
            timestamp=stats.time_ns,
            working_set_bytes=_u64(stats.working_set_bytes),
            commit_memory_bytes=_u64(stats.commit_bytes),
        )
    return cri.MemoryUsage(timestamp=stats.time_ns, working_set_bytes=_u64(stats.working_set_bytes))


def _swap(stats: SwapStats | None) -> cri.SwapUsage | None:
    if stats is None:
        return None
    return cri.SwapUsage(
        timestamp=stats.time_ns,
        swap_usage_bytes=_u64(stats.usage_bytes),
        swap_available_bytes=_u64(stats.available_bytes),
    )


@dataclass
class World:
    """What the fake runtime answers."""

    sandboxes: list[cri.PodSandbox] = field(default_factory=list)
    containers: list[cri.Container] = field(default_factory=list)
    pod_stats: list[cri.PodSandboxStats] = field(default_factory=list)
    container_stats: list[cri.ContainerStats] = field(default_factory=list)


def world_from_summary(
    summary: Summary, *, windows: bool = False, exited: int = 0, not_ready: int = 0
) -> World:
    """The CRI view of ``summary``'s pods (the node is not the runtime's business).

    ``exited`` adds that many exited containers per pod (a restarted container's
    predecessor, same name, stale stats) and ``not_ready`` that many stopped sandboxes with
    stats, which the agent must ignore.
    """
    world = World()
    for index, pod in enumerate(summary.pods):
        _add_pod(world, f"sandbox-{index}", pod, windows=windows, exited=exited)
    for index in range(not_ready):
        gone = PodStats("gone", f"gone-{index}", None, None, None, ())
        _add_pod(world, f"stopped-{index}", gone, windows=windows, exited=0, ready=False)
    return world


def _add_pod(
    world: World, sandbox_id: str, pod: PodStats, *, windows: bool, exited: int, ready: bool = True
) -> None:
    labels = {POD_NAME_LABEL: pod.name, POD_NAMESPACE_LABEL: pod.namespace}
    metadata = cri.PodSandboxMetadata(
        name=pod.name, namespace=pod.namespace, uid=f"uid-{sandbox_id}"
    )
    world.sandboxes.append(
        cri.PodSandbox(
            id=sandbox_id,
            metadata=metadata,
            state=cri.SANDBOX_READY if ready else cri.SANDBOX_NOTREADY,
            labels=labels,
        )
    )
    members: list[Any] = []
    for number, container in enumerate(pod.containers):
        entries = [(f"{sandbox_id}-c{number}", container, cri.CONTAINER_RUNNING)]
        entries += [
            (
                f"{sandbox_id}-c{number}-old{k}",
                ContainerStats(container.name, 1, CpuStats(1, 1), MemoryStats(1, 1)),
                cri.CONTAINER_EXITED,
            )
            for k in range(exited)
        ]
        for container_id, each, state in entries:
            clabels = {**labels, CONTAINER_NAME_LABEL: each.name}
            world.containers.append(
                cri.Container(
                    id=container_id,
                    pod_sandbox_id=sandbox_id,
                    metadata=cri.ContainerMetadata(name=each.name),
                    state=state,
                    created_at=each.start_time_ns or 0,
                    labels=clabels,
                )
            )
            attributes = cri.ContainerAttributes(
                id=container_id, metadata=cri.ContainerMetadata(name=each.name), labels=clabels
            )
            if windows:
                members.append(
                    cri.WindowsContainerStats(
                        attributes=attributes,
                        cpu=_cpu(each.cpu, True),
                        memory=_memory(each.memory, True),
                    )
                )
            else:
                linux_entry = cri.ContainerStats(
                    attributes=attributes,
                    cpu=_cpu(each.cpu, False),
                    memory=_memory(each.memory, False),
                    swap=_swap(each.swap),
                )
                members.append(linux_entry)
                world.container_stats.append(linux_entry)
    attributes = cri.PodSandboxAttributes(id=sandbox_id, metadata=metadata, labels=labels)
    if windows:
        stats = cri.PodSandboxStats(
            attributes=attributes,
            windows=cri.WindowsPodSandboxStats(
                cpu=_cpu(pod.cpu, True), memory=_memory(pod.memory, True), containers=members
            ),
        )
    else:
        stats = cri.PodSandboxStats(
            attributes=attributes,
            linux=cri.LinuxPodSandboxStats(
                cpu=_cpu(pod.cpu, False), memory=_memory(pod.memory, False), containers=members
            ),
        )
    world.pod_stats.append(stats)


class _Servicer(cri_grpc.RuntimeServiceServicer):
    def __init__(self, fake: FakeCriRuntime) -> None:
        self.fake = fake

    async def _gate(self, context: aio.ServicerContext[Any, Any], method: str) -> None:
        self.fake.calls.append(method)
        if self.fake.delay:
            await asyncio.sleep(self.fake.delay)
        if self.fake.fail_with is not None:
            await context.abort(self.fake.fail_with, f"{method}: injected failure")

    async def Version(self, request: Any, context: Any) -> cri.VersionResponse:
        await self._gate(context, "Version")
        name, version = self.fake.runtime
        return cri.VersionResponse(
            version="0.1.0", runtime_name=name, runtime_version=version, runtime_api_version="v1"
        )

    async def ListPodSandbox(self, request: Any, context: Any) -> cri.ListPodSandboxResponse:
        await self._gate(context, "ListPodSandbox")
        items = self.fake.world.sandboxes
        if request.filter.HasField("state"):
            items = [s for s in items if s.state == request.filter.state.state]
        return cri.ListPodSandboxResponse(items=items)

    async def ListContainers(self, request: Any, context: Any) -> cri.ListContainersResponse:
        await self._gate(context, "ListContainers")
        items = self.fake.world.containers
        if request.filter.HasField("state"):
            items = [c for c in items if c.state == request.filter.state.state]
        return cri.ListContainersResponse(containers=items)

    async def ListPodSandboxStats(
        self, request: Any, context: Any
    ) -> cri.ListPodSandboxStatsResponse:
        await self._gate(context, "ListPodSandboxStats")
        if self.fake.sandbox_stats_unimplemented:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        wanted = request.filter.id
        if wanted:
            self.fake.filtered_calls.append(wanted)
        stats = [
            s
            for s in self.fake.world.pod_stats
            if (not wanted or s.attributes.id == wanted)
            and s.attributes.id not in self.fake.cgroup_deleted
        ]
        if not wanted:
            for sandbox_id in self.fake.cgroup_deleted:
                uid = next(s.metadata.uid for s in self.fake.world.sandboxes if s.id == sandbox_id)
                message = CGROUP_DELETED.format(id=sandbox_id, uid=uid)
                await context.abort(grpc.StatusCode.UNKNOWN, message)
        return cri.ListPodSandboxStatsResponse(stats=stats)

    async def ListContainerStats(
        self, request: Any, context: Any
    ) -> cri.ListContainerStatsResponse:
        await self._gate(context, "ListContainerStats")
        return cri.ListContainerStatsResponse(stats=self.fake.world.container_stats)


class FakeCriRuntime:
    """``async with FakeCriRuntime(socket_path) as runtime``: serving on ``runtime.endpoint``."""

    def __init__(self, socket_path: Path, world: World | None = None) -> None:
        self.socket_path = socket_path
        self.world = world or World()
        self.calls: list[str] = []
        #: what ``Version`` answers: (runtime_name, runtime_version)
        self.runtime = ("fake-cri", "1.0.0")
        self.sandbox_stats_unimplemented = False
        self.fail_with: grpc.StatusCode | None = None
        self.delay = 0.0
        #: sandboxes deleted with their cgroup (see ``delete_pod``)
        self.cgroup_deleted: set[str] = set()
        #: the ids asked for by filtered ``ListPodSandboxStats`` calls
        self.filtered_calls: list[str] = []
        self._server: aio.Server | None = None

    def delete_pod(self, sandbox_id: str) -> None:
        """What containerd 1.6 shows after the kubelet stops a deleted pod: its sandbox
        NOTREADY and still listed, its containers exited, its cgroup gone (so an unfiltered
        ``ListPodSandboxStats`` fails with ``CGROUP_DELETED``)."""
        for index, sandbox in enumerate(self.world.sandboxes):
            if sandbox.id == sandbox_id:
                stopped = cri.PodSandbox()
                stopped.CopyFrom(sandbox)
                stopped.state = cri.SANDBOX_NOTREADY
                self.world.sandboxes[index] = stopped
        for index, container in enumerate(self.world.containers):
            if container.pod_sandbox_id == sandbox_id:
                exited = cri.Container()
                exited.CopyFrom(container)
                exited.state = cri.CONTAINER_EXITED
                self.world.containers[index] = exited
        self.cgroup_deleted.add(sandbox_id)

    def remove_pod(self, sandbox_id: str) -> None:
        """The kubelet removed the sandbox (garbage collection): gone from every list."""
        world = self.world
        world.sandboxes = [s for s in world.sandboxes if s.id != sandbox_id]
        world.containers = [c for c in world.containers if c.pod_sandbox_id != sandbox_id]
        world.pod_stats = [s for s in world.pod_stats if s.attributes.id != sandbox_id]
        world.container_stats = [
            s for s in world.container_stats if not s.attributes.id.startswith(sandbox_id + "-")
        ]
        self.cgroup_deleted.discard(sandbox_id)

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket_path}"

    async def start(self) -> None:
        self._server = aio.server()
        cri_grpc.add_RuntimeServiceServicer_to_server(_Servicer(self), self._server)
        self._server.add_insecure_port(self.endpoint)
        await self._server.start()

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
            self._server = None
        self.socket_path.unlink(missing_ok=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
