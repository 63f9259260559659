"""A private containerd (Debian's package) for a test: its own root, state and socket in a
short folder under /tmp, no cgroups and no CNI, stopped and removed afterwards. Used by the
node agent's real-runtime test and by the image's run test; the realnode's containerd is
never touched.

`private_containerd(unavailable, snapshotter=...)` yields the folder; the socket is
`containerd.sock` in it. `unavailable(reason)` is called (and must raise: a skip, or a failure
under CI) when containerd is missing, not root, or does not start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

CONFIG = """\
version = 2
root = "{dir}/root"
state = "{dir}/state"
[grpc]
  address = "{dir}/containerd.sock"
[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  disable_cgroup = true
  disable_tcp_service = true
"""
#: How long containerd may take to open its socket: a failure limit for a broken install,
#: not a speed check (it takes well under a second).
START_LIMIT = 60.0


@contextlib.contextmanager
def private_containerd(
    unavailable: Callable[[str], NoReturn], *, snapshotter: str | None = None, prefix: str = "ctd-"
) -> Iterator[Path]:
    binary = shutil.which("containerd")
    if binary is None:
        unavailable("containerd is not installed (Debian: apt-get install containerd)")
    if os.geteuid() != 0:
        unavailable("containerd needs root to start (its root and state directories, mounts)")
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: a socket path
    config = CONFIG.format(dir=work)
    if snapshotter is not None:
        config += '  [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        config += f'    snapshotter = "{snapshotter}"\n'
    (work / "config.toml").write_text(config)
    log = (work / "containerd.log").open("w")
    process = subprocess.Popen(
        [binary, "--config", str(work / "config.toml")], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + START_LIMIT
        while not (work / "containerd.sock").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = (work / "containerd.log").read_text()[-2000:]
                unavailable(f"containerd could not start here (exit {process.poll()}): {tail}")
            time.sleep(0.1)
        yield work
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        # Containers' root filesystems may still be mounted below the folder.
        subprocess.run(
            ["umount", "--recursive", "--lazy", str(work)], capture_output=True, check=False
        )
        shutil.rmtree(work, ignore_errors=True)
