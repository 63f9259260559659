"""The node's own totals from the host, as cAdvisor reports the root cgroup to the kubelet.

* CPU (core-nanoseconds since boot): cgroup v2 ``<cgroup root>/cpu.stat`` ``usage_usec``,
  else cgroup v1 ``<cgroup root>/cpuacct/cpuacct.usage``, else ``/proc/stat``'s first line
  (user + nice + system + irq + softirq + steal ticks; idle, iowait and the guest columns,
  already inside user/nice, left out) at ``SC_CLK_TCK`` ticks per second;
* memory working set: ``/proc/meminfo`` ``MemTotal - MemFree - Inactive(file)`` (cAdvisor's
  usage minus inactive file pages), at least 0;
* swap usage: ``SwapTotal - SwapFree``.

The timestamp of each reading is the time it was read (the host has no other clock for it).
In a pod, mount the host's ``/sys/fs/cgroup`` and point ``--host-cgroup-root`` at it (a
container's own cgroup namespace shows its own cgroup as the root); ``/proc/stat`` and
``/proc/meminfo`` are host-wide already. Cost: three small file reads, O(1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from custom_metrics_server.compute.summary import CpuStats, MemoryStats, NodeStats, SwapStats

__all__ = ["HostReader", "cpu_from_proc_stat", "memory_from_meminfo"]

_PROC_STAT_BUSY: Final = (0, 1, 2, 5, 6, 7)  # user nice system . . irq softirq steal


def cpu_from_proc_stat(text: str, ticks_per_second: int) -> int:
    """Busy core-nanoseconds from ``/proc/stat``. O(1)."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            fields = [int(x) for x in line.split()[1:]]
            ticks = sum(fields[i] for i in _PROC_STAT_BUSY if i < len(fields))
            return ticks * 1_000_000_000 // ticks_per_second
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def memory_from_meminfo(text: str) -> tuple[int, int]:
    """(working set bytes, swap usage bytes) from ``/proc/meminfo``. O(lines)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * (1024 if parts[-1] == "kB" else 1)
    working_set = values["MemTotal"] - values["MemFree"] - values.get("Inactive(file)", 0)
    swap = values.get("SwapTotal", 0) - values.get("SwapFree", 0)
    return max(0, working_set), max(0, swap)


class HostReader:
    """Reads :class:`.NodeStats` from ``proc_root`` and ``cgroup_root``."""

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

    def _cpu_nanoseconds(self) -> int:
        try:
            text = (self.cgroup_root / "cpu.stat").read_text()
        except OSError:
            pass
        else:
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) * 1000
        try:
            return int((self.cgroup_root / "cpuacct" / "cpuacct.usage").read_text())
        except OSError:
            pass
        return cpu_from_proc_stat((self.proc_root / "stat").read_text(), self._ticks)

    def read(self) -> NodeStats:
        """The node's CPU counter, working set and swap now. Raises OSError/ValueError."""
        cpu = self._cpu_nanoseconds()
        cpu_time = self._clock_ns()
        working_set, swap = memory_from_meminfo((self.proc_root / "meminfo").read_text())
        memory_time = self._clock_ns()
        return NodeStats(
            CpuStats(cpu, cpu_time),
            MemoryStats(working_set, memory_time),
            SwapStats(swap, None, memory_time),
        )
