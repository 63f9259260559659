"""Types of the optional C reader (_kubelet_scan.c); see kubelet_runs.py."""

def scan_run(
    body: bytes, start: int, end: int, head: bytes, /
) -> tuple[bytes, list[float], list[float] | None] | None: ...
