"""`runtime.limits`: the server raises its soft open-files limit to the hard one at start-up,
as a Go program does, so thousands of held watch connections never meet a soft limit of
1,024 a container runtime may give."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from custom_metrics_server.runtime.limits import raise_open_files_limit
from custom_metrics_server.testing.server_process import start_server, stop_server


def open_files_limits(pid: int) -> tuple[int, int]:
    """(soft, hard) `Max open files` of a process, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no Max open files line")


def test_the_served_process_runs_at_its_hard_open_files_limit(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 1024 or hard == resource.RLIM_INFINITY:
        pytest.skip(f"the hard open-files limit here ({hard}) leaves nothing to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # what the child inherits
    try:
        server = start_server(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert open_files_limits(server.pid) == (hard, hard)
    finally:
        stop_server(server)


def test_a_limit_already_at_its_hard_value_is_left_as_it_is() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        assert raise_open_files_limit() == (hard, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
