"""CRI messages to a :class:`.Summary`: which containers and pods count, and their names.

The join follows the kubelet's CRI stats provider (``pkg/kubelet/stats/cri_stats_provider.go``):

* pods are the *ready* sandboxes (``ListPodSandbox``), containers the *running* ones
  (``ListContainers``), so an exited container's leftover stats never shadow its restarted
  successor of the same name; stats of anything else are ignored;
* a pod's namespace and name come from the sandbox metadata, else from its
  ``io.kubernetes.pod.namespace`` / ``io.kubernetes.pod.name`` labels; a container's name
  from its metadata, else its ``io.kubernetes.container.name`` label;
* a container's start time is its ``created_at`` (nanoseconds), as the kubelet reports it;
* the pod's CPU and memory are the sandbox's own (``ListPodSandboxStats``); swap, which the
  CRI has no pod-level field for, is the sum over its containers, timed by the first one
  (the kubelet's ``addSwapStats`` without cAdvisor). When the runtime has no
  ``ListPodSandboxStats`` (``ListContainerStats`` is used instead), CPU and memory are
  summed over the containers the same way (``addCRIPodCPUStats``/``addCRIPodMemoryStats``);
* a ``UInt64Value`` that is not set, or a usage message that is absent, is "not reported".

Windows sandboxes (``windows`` instead of ``linux``) carry committed memory and no swap.
Pure: no I/O, no clocks. Cost: O(sandboxes + containers) with dict lookups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    PodStats,
    SwapStats,
)
from custom_metrics_server.node_agent.cri import api_pb2 as cri

__all__ = [
    "CONTAINER_NAME_LABEL",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "pods_from_container_stats",
    "pods_from_sandbox_stats",
]

POD_NAME_LABEL: Final = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL: Final = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL: Final = "io.kubernetes.container.name"


def _cpu(usage: cri.CpuUsage | cri.WindowsCpuUsage) -> CpuStats:
    has = usage.HasField("usage_core_nano_seconds")
    return CpuStats(usage.usage_core_nano_seconds.value if has else None, usage.timestamp)


def _memory(usage: cri.MemoryUsage) -> MemoryStats:
    has = usage.HasField("working_set_bytes")
    return MemoryStats(usage.working_set_bytes.value if has else None, usage.timestamp)


def _windows_memory(usage: cri.WindowsMemoryUsage) -> MemoryStats:
    working_set = usage.working_set_bytes.value if usage.HasField("working_set_bytes") else None
    commit = usage.commit_memory_bytes.value if usage.HasField("commit_memory_bytes") else None
    return MemoryStats(working_set, usage.timestamp, commit)


def _swap(usage: cri.SwapUsage) -> SwapStats:
    used = usage.swap_usage_bytes.value if usage.HasField("swap_usage_bytes") else None
    left = usage.swap_available_bytes.value if usage.HasField("swap_available_bytes") else None
    return SwapStats(used, left, usage.timestamp)


def _container_name(attributes: cri.ContainerAttributes) -> str:
    return attributes.metadata.name or attributes.labels.get(CONTAINER_NAME_LABEL, "")


def _linux_container(
    stats: cri.ContainerStats, created: Mapping[str, cri.Container]
) -> ContainerStats | None:
    container = created.get(stats.attributes.id)
    if container is None:
        return None
    return ContainerStats(
        _container_name(stats.attributes) or container.metadata.name,
        container.created_at,
        _cpu(stats.cpu) if stats.HasField("cpu") else None,
        _memory(stats.memory) if stats.HasField("memory") else None,
        _swap(stats.swap) if stats.HasField("swap") else None,
    )


def _windows_container(
    stats: cri.WindowsContainerStats, created: Mapping[str, cri.Container]
) -> ContainerStats | None:
    container = created.get(stats.attributes.id)
    if container is None:
        return None
    return ContainerStats(
        _container_name(stats.attributes) or container.metadata.name,
        container.created_at,
        _cpu(stats.cpu) if stats.HasField("cpu") else None,
        _windows_memory(stats.memory) if stats.HasField("memory") else None,
    )


def _pod_identity(
    metadata: cri.PodSandboxMetadata, labels: Mapping[str, str], sandbox: cri.PodSandbox
) -> tuple[str, str]:
    namespace = (
        metadata.namespace or sandbox.metadata.namespace or labels.get(POD_NAMESPACE_LABEL, "")
    )
    name = metadata.name or sandbox.metadata.name or labels.get(POD_NAME_LABEL, "")
    return namespace, name


def _summed_swap(containers: Sequence[ContainerStats]) -> SwapStats | None:
    swaps = [c.swap for c in containers if c.swap is not None]
    if not swaps:
        return None
    return SwapStats(
        sum(s.usage_bytes or 0 for s in swaps),
        sum(s.available_bytes or 0 for s in swaps),
        swaps[0].time_ns,
    )


def _summed_cpu(containers: Sequence[ContainerStats]) -> CpuStats | None:
    cpus = [c.cpu for c in containers if c.cpu is not None]
    if not cpus:
        return None
    return CpuStats(sum(c.usage_core_nanoseconds or 0 for c in cpus), cpus[0].time_ns)


def _summed_memory(containers: Sequence[ContainerStats]) -> MemoryStats | None:
    memories = [c.memory for c in containers if c.memory is not None]
    if not memories:
        return None
    return MemoryStats(sum(m.working_set_bytes or 0 for m in memories), memories[0].time_ns)


def pods_from_sandbox_stats(
    sandboxes: Iterable[cri.PodSandbox],
    containers: Iterable[cri.Container],
    stats: Iterable[cri.PodSandboxStats],
) -> tuple[PodStats, ...]:
    """Pods from ``ListPodSandboxStats``; ``sandboxes`` and ``containers`` are the ready and
    running ones. O(sandboxes + containers)."""
    ready = {sandbox.id: sandbox for sandbox in sandboxes}
    running = {container.id: container for container in containers}
    pods: list[PodStats] = []
    for each in stats:
        sandbox = ready.get(each.attributes.id)
        if sandbox is None:
            continue
        namespace, name = _pod_identity(each.attributes.metadata, each.attributes.labels, sandbox)
        cpu: CpuStats | None = None
        memory: MemoryStats | None = None
        members: list[ContainerStats] = []
        if each.HasField("windows"):
            windows = each.windows
            cpu = _cpu(windows.cpu) if windows.HasField("cpu") else None
            memory = _windows_memory(windows.memory) if windows.HasField("memory") else None
            members = [
                found
                for item in windows.containers
                if (found := _windows_container(item, running)) is not None
            ]
        else:
            linux = each.linux
            cpu = _cpu(linux.cpu) if linux.HasField("cpu") else None
            memory = _memory(linux.memory) if linux.HasField("memory") else None
            members = [
                found
                for entry in linux.containers
                if (found := _linux_container(entry, running)) is not None
            ]
        pods.append(PodStats(namespace, name, cpu, memory, _summed_swap(members), tuple(members)))
    return tuple(pods)


def pods_from_container_stats(
    sandboxes: Iterable[cri.PodSandbox],
    containers: Iterable[cri.Container],
    stats: Iterable[cri.ContainerStats],
) -> tuple[PodStats, ...]:
    """Pods from ``ListContainerStats`` (runtimes without ``ListPodSandboxStats``): pod
    totals are the sums over their running containers. O(sandboxes + containers)."""
    ready = {sandbox.id: sandbox for sandbox in sandboxes}
    running = {container.id: container for container in containers}
    members: dict[str, list[ContainerStats]] = {sandbox_id: [] for sandbox_id in ready}
    for entry in stats:
        container = running.get(entry.attributes.id)
        if container is None or container.pod_sandbox_id not in members:
            continue
        found = _linux_container(entry, running)
        if found is not None:
            members[container.pod_sandbox_id].append(found)
    pods: list[PodStats] = []
    for sandbox_id, sandbox in ready.items():
        group = members[sandbox_id]
        namespace, name = _pod_identity(sandbox.metadata, sandbox.labels, sandbox)
        pods.append(
            PodStats(
                namespace,
                name,
                _summed_cpu(group),
                _summed_memory(group),
                _summed_swap(group),
                tuple(group),
            )
        )
    return tuple(pods)
