"""The kubelet collector's test cases (``resource_metrics_test.go``) as :class:`Summary`
values, beside the exposition each produced (``tests/fixtures/kubelet-samples``).

The upstream test compares parsed metric families, so its expected text lists families in
whatever order its author wrote; the Go registry writes them sorted by name.
:func:`go_order` puts a sample's family blocks in that order without touching a byte of any
block, which is what a real kubelet serves (compare ``metrics-server_client_test_...``).
"""

from __future__ import annotations

from pathlib import Path

from custom_metrics_server.kubelet_format.summary import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    NodeStats,
    PodStats,
    Summary,
    SwapStats,
)

SAMPLES = Path(__file__).parent.parent / "fixtures" / "kubelet-samples"

#: The upstream test's testTime: time.Unix(1624396278, 302091597).
T = 1_624_396_278_302_091_597
SECOND = 1_000_000_000


def cpu(seconds: int, at: int = T) -> CpuStats:
    return CpuStats(seconds * SECOND, at)


def memory(working_set: int, commit: int | None = None, at: int = T) -> MemoryStats:
    return MemoryStats(working_set, at, commit)


CASES: dict[str, Summary | None] = {
    "01_error_getting_summary": None,
    "02_arbitrary_node_metrics": Summary(
        NodeStats(cpu(10), memory(1000, 2000), SwapStats(500, None, T)), ()
    ),
    "03_node_metrics_with_different_timestamps": Summary(
        NodeStats(cpu(10), memory(1000), SwapStats(500, None, T + 10 * SECOND)), ()
    ),
    "04_nil_node_metrics": Summary(NodeStats(None, None), ()),
    "05_arbitrary_container_metrics_for_different_container_pods_and_namespaces": Summary(
        None,
        (
            PodStats(
                "namespace_a",
                "pod_a",
                None,
                None,
                None,
                (
                    ContainerStats(
                        "container_a",
                        T - 30 * SECOND,
                        cpu(10),
                        memory(1000, 2000),
                        SwapStats(1000, 9000, T),
                    ),
                    ContainerStats("container_b", T - 120 * SECOND, cpu(10), memory(1000)),
                ),
            ),
            PodStats(
                "namespace_b",
                "pod_b",
                None,
                None,
                None,
                (ContainerStats("container_a", T - 600 * SECOND, cpu(10), memory(1000, 2000)),),
            ),
        ),
    ),
    "06_arbitrary_container_metrics_for_negative_starttime": Summary(
        None,
        (
            PodStats(
                "namespace_a",
                "pod_a",
                None,
                None,
                None,
                (ContainerStats("container_a", -T, cpu(10), memory(1000, 2000)),),
            ),
        ),
    ),
    "07_nil_container_metrics": Summary(
        None,
        (
            PodStats(
                "namespace_a",
                "pod_a",
                None,
                None,
                None,
                (ContainerStats("container_a", T - 30 * SECOND, None, None),),
            ),
            PodStats(
                "namespace_b",
                "pod_b",
                None,
                None,
                None,
                (ContainerStats("container_a", T - 600 * SECOND, cpu(10), memory(1000)),),
            ),
        ),
    ),
    "08_arbitrary_pod_metrics": Summary(
        None,
        (PodStats("namespace_a", "pod_a", cpu(10), memory(1000), SwapStats(5000, None, T), ()),),
    ),
    "09_nil_pod_metrics": Summary(None, (PodStats("namespace_a", "pod_a", None, None, None, ()),)),
}


def sample_path(case: str) -> Path:
    return SAMPLES / f"kubernetes_kubelet_collector_{case}.dedented.txt"


def families(text: str) -> dict[str, str]:
    """A body's family blocks by name (HELP, TYPE and series lines, each ending in newline)."""
    blocks: dict[str, str] = {}
    name = ""
    for line in text.splitlines(keepends=True):
        if not line.strip():
            continue
        if line.startswith("# HELP "):
            name = line.split()[2]
            blocks[name] = ""
        blocks[name] += line
    return blocks


def go_order(text: str, *, without: frozenset[str] = frozenset()) -> bytes:
    """The sample's family blocks sorted by name (the Go registry's order), blocks verbatim;
    families named in ``without`` left out."""
    blocks = families(text)
    return "".join(blocks[name] for name in sorted(blocks) if name not in without).encode()
