"""Where the control-plane tier finds kube-apiserver, kube-controller-manager, kubectl and etcd.

In order: `$KUBEBUILDER_ASSETS` (controller-runtime envtest's convention: a folder with
kube-apiserver, etcd and kubectl, as `setup-envtest use -p path 1.36.x` prints), then the
repository's sibling `../shared/k8s` (xz-compressed v1.36.3 builds, unpacked once by its
`unpack.sh` into a cache folder outside the source tree and reused by later runs), and etcd
from `$PATH` (Debian's etcd-server). A missing binary is a `MissingBinary` whose message says
where it was looked for; the fixtures turn it into a skip, or a failure under CI=true.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["SHARED_K8S", "MissingBinary", "cache_dir", "find_binary"]

ROOT = Path(__file__).resolve().parents[2]
#: The shared Kubernetes binaries, next to the repository (`/work/shared/k8s` on the dev box).
SHARED_K8S = Path(os.environ.get("CMS_SHARED_K8S", ROOT.parent / "shared" / "k8s"))


class MissingBinary(Exception):
    """A binary the control-plane tier needs is nowhere to be found."""


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/custom-metrics-server/k8s` (`~/.cache/...` by default): where
    `../shared/k8s` is unpacked, once per checksum list."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "custom-metrics-server" / "k8s"


def _unpacked(name: str) -> Path | None:
    """`name` from `../shared/k8s`, unpacked into the cache if needed; None if not there.
    A marker holding the checksum list says the folder was checked against it, so a warm run
    costs no checksum pass; a lock keeps two sessions from unpacking at once."""
    sums = SHARED_K8S / "SHA256SUMS"
    if not (SHARED_K8S / f"{name}.xz").is_file() or not sums.is_file():
        return None
    dest = cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / name
    marker = dest / f".{name}.verified"
    expected = sums.read_text()
    if target.is_file() and marker.is_file() and marker.read_text() == expected:
        return target
    with open(dest / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target.is_file() and marker.is_file() and marker.read_text() == expected):
            result = subprocess.run(
                ["sh", str(SHARED_K8S / "unpack.sh"), str(dest), name],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if result.returncode != 0:
                raise MissingBinary(
                    f"{SHARED_K8S}/unpack.sh {dest} {name} failed: {result.stderr.strip()}"
                )
            marker.write_text(expected)
    return target


def find_binary(name: str) -> Path:
    """The path of `name` (kube-apiserver, kube-controller-manager, kubectl, etcd, ...)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and (Path(assets) / name).is_file():
        return Path(assets) / name
    found = _unpacked(name)
    if found is not None:
        return found
    if name == "etcd" and (on_path := shutil.which("etcd")):
        return Path(on_path)
    where = [f"$KUBEBUILDER_ASSETS ({assets or 'unset'})", str(SHARED_K8S)]
    if name == "etcd":
        where.append("$PATH (Debian: apt-get install etcd-server)")
    raise MissingBinary(f"{name} not found in {', '.join(where)}")


if __name__ == "__main__":  # `python3 -m tests.controlplane.binaries NAME...` (.ci/run)
    import sys

    try:
        for binary in sys.argv[1:]:
            print(f"{binary}: {find_binary(binary)}")
    except MissingBinary as err:
        sys.exit(f"tests.controlplane.binaries: {err}")
