"""Remove from the image's venv what the server never loads (the Dockerfile's last builder step).

    python -P prune_venv.py VENV

What goes, and why it is never loaded (docs/performance.md, "The image"):

* pip and setuptools (and _distutils_hack): they installed the venv; nothing
  imports them at run time, and a read-only image installs nothing.
* kubernetes.aio, kubernetes.client.api.* and kubernetes.client.models.*: the server uses the
  kubernetes package only for its kubeconfig and in-cluster loaders (kube/config.py:
  `kubernetes.config`, `kubernetes.client.Configuration`). `kubernetes.client` and its
  `models` package import their API and model classes lazily, on first attribute access,
  which the loaders never make; the package `__init__` files stay.
* aiohttp and what only it and kubernetes.aio need (aiohttp-retry, aiohappyeyeballs,
  aiosignal, attrs, frozenlist, multidict, propcache, yarl).
* test suites shipped inside packages, and the package's own test kit
  (`custom_metrics_server/testing`: for plugin authors' tests, with the `test` extra's httpx,
  which the image does not install).

tests/deployment/test_image.py proves it in the built image: every module of custom_metrics_server
imports, the kubeconfig loader runs, and the served server answers. Prints what it removed
and the venv's size before and after.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

DISTRIBUTIONS = (
    "pip",
    "setuptools",
    "aiohttp",
    "aiohttp_retry",
    "aiohappyeyeballs",
    "aiosignal",
    "attrs",
    "frozenlist",
    "multidict",
    "propcache",
    "yarl",
)
TOP_LEVEL = (
    "pip",
    "setuptools",
    "_distutils_hack",
    "distutils-precedence.pth",
    "aiohttp",
    "aiohttp_retry",
    "aiohappyeyeballs",
    "aiosignal",
    "attr",
    "attrs",
    "frozenlist",
    "multidict",
    "propcache",
    "yarl",
    "kubernetes/aio",
    "websocket/tests",
    "certifi/tests",
    "custom_metrics_server/testing",
)
#: Packages whose modules are imported lazily: everything but `__init__.py` goes.
LAZY_PACKAGES = ("kubernetes/client/api", "kubernetes/client/models")


def size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() or p.is_symlink())


def remove(path: Path) -> int:
    if not (path.exists() or path.is_symlink()):
        return 0
    freed = size(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()
    return freed


def main(venv: Path) -> int:
    site = next(venv.glob("lib/python3*/site-packages"))
    before = size(venv)
    removed = [(name, remove(site / name)) for name in TOP_LEVEL]
    removed += [
        (info.name, remove(info))
        for dist in DISTRIBUTIONS
        for info in site.glob(f"{dist}-*.dist-info")
    ]
    for package in LAZY_PACKAGES:
        freed = sum(remove(p) for p in (site / package).iterdir() if p.name != "__init__.py")
        freed += remove(site / package / "__pycache__")
        removed.append((f"{package}/* (not __init__.py)", freed))
    removed += [(f"bin/{script.name}", remove(script)) for script in venv.glob("bin/pip*")]
    missing = [name for name, freed in removed if freed == 0]
    if missing:
        # A lock update renamed or dropped something: say so rather than keep stale rules.
        print(f"prune_venv: not found, nothing removed: {', '.join(missing)}", file=sys.stderr)
        return 1
    after = size(venv)
    for name, freed in sorted(removed, key=lambda item: -item[1]):
        print(f"prune_venv: {freed / 1e6:8.1f} MB  {name}")
    print(f"prune_venv: venv {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
