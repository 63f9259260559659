"""Types of the optional C reader (_scan.c); see runs.py."""

from typing import overload

@overload
def scan_run(
    body: bytes, start: int, end: int, head: bytes, /
) -> tuple[bytes, list[float], list[float] | None, float] | None: ...
@overload
def scan_run(
    body: bytes, start: int, end: int, head: bytes, reference: bytes, reference_head: bytes, /
) -> tuple[bytes, list[float], list[float] | None, float] | None: ...
