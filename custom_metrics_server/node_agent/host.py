"""The node's own totals from the host, read as cAdvisor reads the root cgroup for the kubelet.

The kubelet's ``node_*`` figures are cAdvisor's stats of the root cgroup ``/`` (runc's
``libcontainer/cgroups`` readers under it). This module reads the same files with the same
arithmetic, picking the hierarchy by what ``--host-cgroup-root`` holds:

* **cgroup v2** (``<root>/cgroup.controllers`` exists). The root has no ``memory.current``,
  so runc emulates it (``fs2.rootStatsFromMeminfo``): usage = ``anon + file`` of
  ``<root>/memory.stat``; cAdvisor's working set = usage - ``inactive_file`` (0 if that is
  negative). CPU: ``<root>/cpu.stat`` ``usage_usec``.
* **cgroup v1** (``<root>/memory/memory.usage_in_bytes`` exists; also hybrid hosts, whose
  ``<root>/unified`` is not used for these): working set = ``memory.usage_in_bytes`` -
  ``total_inactive_file`` of ``<root>/memory/memory.stat`` (0 if negative). CPU:
  ``<root>/cpuacct/cpuacct.usage`` (or ``cpu,cpuacct/``).
* **No cgroup root mounted**: an approximation, not the kubelet's figure: working set
  ``MemTotal - MemFree - Inactive(file)`` of ``/proc/meminfo`` (it counts kernel memory the
  root cgroup does not: 20-38 % above the kubelet's on a real node), CPU from ``/proc/stat``'s
  first line (user + nice + system + irq + softirq + steal ticks at ``SC_CLK_TCK`` a second).

Swap: ``SwapTotal - SwapFree`` of ``/proc/meminfo`` on every hierarchy (runc's root swap on
v2; on v1 the root's ``memsw`` counters are absent unless swap accounting is on), reported
with ``SwapFree`` as available, so the collector can tell a host without swap.

The timestamp of each reading is the time it was read (the host has no other clock for it;
cAdvisor's is its housekeeping time, so two reads of a changing host differ by what changed
between them). In a pod, mount the host's ``/sys/fs/cgroup`` and point ``--host-cgroup-root``
at it (a container's own cgroup namespace shows its own cgroup as the root), and mount the
host's ``/proc`` at ``--host-proc`` (``/proc/meminfo`` is host-wide in a pod too, but not
under every runtime's ``/proc`` masking, e.g. LXCFS). Cost: four small file reads, O(lines).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

from custom_metrics_server.kubelet_format.summary import CpuStats, MemoryStats, NodeStats, SwapStats

__all__ = [
    "HostReader",
    "cgroup_version",
    "cpu_from_proc_stat",
    "memory_from_meminfo",
    "working_set_v1",
    "working_set_v2",
]

_PROC_STAT_BUSY: Final = (0, 1, 2, 5, 6, 7)  # user nice system . . irq softirq steal


def cpu_from_proc_stat(text: str, ticks_per_second: int) -> int:
    """Busy core-nanoseconds from ``/proc/stat``. O(1)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:]]
            ticks = sum(fields[i] for i in _PROC_STAT_BUSY if i < len(fields))
            return ticks * 1_000_000_000 // ticks_per_second
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def _meminfo(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * (1024 if parts[-1] == "kB" else 1)
    return values


def memory_from_meminfo(text: str) -> tuple[int, int]:
    """(working set bytes, swap usage bytes) from ``/proc/meminfo``: the approximation used
    without a cgroup root (see the module). O(lines)."""
    values = _meminfo(text)
    return _meminfo_working_set(values), _swap_used(values)


def _meminfo_working_set(values: dict[str, int]) -> int:
    working_set = values["MemTotal"] - values["MemFree"] - values.get("Inactive(file)", 0)
    return max(0, working_set)


def _swap_used(values: dict[str, int]) -> int:
    return max(0, values.get("SwapTotal", 0) - values.get("SwapFree", 0))


def _stat(text: str) -> dict[str, int]:
    """``key value`` lines of a cgroup ``memory.stat`` / ``cpu.stat``. O(lines)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value:
            values[key] = int(value)
    return values


def working_set_v1(usage_in_bytes: str, memory_stat: str) -> int:
    """cAdvisor's working set of a cgroup v1 memory cgroup: ``memory.usage_in_bytes`` -
    ``total_inactive_file`` (0 when the inactive file pages exceed the usage). O(lines)."""
    usage = int(usage_in_bytes)
    inactive = _stat(memory_stat)["total_inactive_file"]
    return usage - inactive if inactive < usage else 0


def working_set_v2(root_memory_stat: str) -> int:
    """cAdvisor's working set of the cgroup v2 root: runc's emulated usage ``anon + file``
    minus ``inactive_file`` (0 when negative). O(lines)."""
    values = _stat(root_memory_stat)
    usage = values["anon"] + values["file"]
    inactive = values["inactive_file"]
    return usage - inactive if inactive < usage else 0


def cgroup_version(cgroup_root: Path) -> Literal[1, 2] | None:
    """Which hierarchy ``cgroup_root`` holds: 2 (unified), 1 (legacy or hybrid), or None
    (no memory controller there). O(1)."""
    if (cgroup_root / "cgroup.controllers").is_file():
        return 2
    if (cgroup_root / "memory" / "memory.usage_in_bytes").is_file():
        return 1
    return None


class HostReader:
    """Reads :class:`.NodeStats` from ``proc_root`` and ``cgroup_root`` (see the module)."""

    def __init__(
        self,
        *,
        proc_root: Path = Path("/proc"),
        cgroup_root: Path = Path("/sys/fs/cgroup"),
        clock_ns: Callable[[], int] = time.time_ns,
        ticks_per_second: int | None = None,
    ) -> None:
        self.proc_root = proc_root
        self.cgroup_root = cgroup_root
        self._clock_ns = clock_ns
        self._ticks = ticks_per_second or os.sysconf("SC_CLK_TCK")

    @property
    def source(self) -> str:
        """Where the figures come from, for the start-up line."""
        version = cgroup_version(self.cgroup_root)
        if version is None:
            return f"{self.proc_root}/meminfo and /stat (no cgroup root at {self.cgroup_root})"
        return f"the root cgroup (v{version}) at {self.cgroup_root}"

    def _cpu_nanoseconds(self, version: int | None) -> int:
        root = self.cgroup_root
        if version == 2:
            return _stat((root / "cpu.stat").read_text())["usage_usec"] * 1000
        if version == 1:
            for directory in ("cpuacct", "cpu,cpuacct"):
                try:
                    return int((root / directory / "cpuacct.usage").read_text())
                except FileNotFoundError:
                    continue
        return cpu_from_proc_stat((self.proc_root / "stat").read_text(), self._ticks)

    def _working_set(self, version: int | None, meminfo: dict[str, int]) -> int:
        root = self.cgroup_root
        if version == 2:
            return working_set_v2((root / "memory.stat").read_text())
        if version == 1:
            memory = root / "memory"
            return working_set_v1(
                (memory / "memory.usage_in_bytes").read_text(),
                (memory / "memory.stat").read_text(),
            )
        return _meminfo_working_set(meminfo)

    def read(self) -> NodeStats:
        """The node's CPU counter, working set and swap now. Raises OSError, ValueError or
        KeyError (a file without the expected key)."""
        version = cgroup_version(self.cgroup_root)
        cpu = self._cpu_nanoseconds(version)
        cpu_time = self._clock_ns()
        meminfo = _meminfo((self.proc_root / "meminfo").read_text())
        working_set = self._working_set(version, meminfo)
        memory_time = self._clock_ns()
        return NodeStats(
            CpuStats(cpu, cpu_time),
            MemoryStats(working_set, memory_time),
            SwapStats(_swap_used(meminfo), meminfo.get("SwapFree", 0), memory_time),
        )
