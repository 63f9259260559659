"""Node totals from host files: cgroup v2, cgroup v1 and /proc/stat, and /proc/meminfo."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server.compute.summary import CpuStats, MemoryStats, NodeStats, SwapStats
from custom_metrics_server.node_agent.host import (
    HostReader,
    cpu_from_proc_stat,
    memory_from_meminfo,
)

MEMINFO = """\
MemTotal:       24684092 kB
MemFree:        22879788 kB
MemAvailable:   23500000 kB
Active(file):     142612 kB
Inactive(file):   268424 kB
SwapTotal:       1048572 kB
SwapFree:         524288 kB
HugePages_Total:       0
"""
PROC_STAT = """\
cpu  556385 311 77120 1038785 2882 10 18256 344 7 0
cpu0 199979 289 34193 601680 582 0 9014 172 0 0
intr 1 2 3
"""


def host(tmp_path: Path, files: dict[str, str]) -> HostReader:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    clock = iter(range(1000, 2000))
    return HostReader(
        proc_root=tmp_path / "proc",
        cgroup_root=tmp_path / "cgroup",
        clock_ns=lambda: next(clock),
        ticks_per_second=100,
    )


def test_meminfo_working_set_and_swap() -> None:
    working_set, swap = memory_from_meminfo(MEMINFO)
    assert working_set == (24684092 - 22879788 - 268424) * 1024
    assert swap == (1048572 - 524288) * 1024


def test_proc_stat_counts_busy_ticks_only() -> None:
    busy = 556385 + 311 + 77120 + 10 + 18256 + 344  # user nice system irq softirq steal
    assert cpu_from_proc_stat(PROC_STAT, 100) == busy * 10_000_000
    with pytest.raises(ValueError, match="no aggregate"):
        cpu_from_proc_stat("cpu0 1 2 3\n", 100)


@pytest.mark.parametrize(
    ("files", "cpu_ns"),
    [
        ({"cgroup/cpu.stat": "usage_usec 123456789\nuser_usec 1\n"}, 123_456_789_000),
        ({"cgroup/cpuacct/cpuacct.usage": "987654321012\n"}, 987_654_321_012),
        ({}, (556385 + 311 + 77120 + 10 + 18256 + 344) * 10_000_000),
    ],
    ids=["cgroup-v2", "cgroup-v1", "proc-stat"],
)
def test_reader_prefers_the_root_cgroup(tmp_path: Path, files: dict[str, str], cpu_ns: int) -> None:
    reader = host(tmp_path, {"proc/stat": PROC_STAT, "proc/meminfo": MEMINFO, **files})
    working_set, swap = memory_from_meminfo(MEMINFO)
    assert reader.read() == NodeStats(
        CpuStats(cpu_ns, 1000), MemoryStats(working_set, 1001), SwapStats(swap, None, 1001)
    )


def test_this_machine(tmp_path: Path) -> None:
    node = HostReader().read()
    assert node.cpu is not None
    assert node.cpu.usage_core_nanoseconds
    assert node.memory is not None
    assert node.memory.working_set_bytes
