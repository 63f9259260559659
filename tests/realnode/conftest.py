"""The real-node tier's fixtures: `realnode`, the shared `../shared/realnode` cluster.

`realnode` (session) is a `tests.realnode.node.RealNode`: `dir`, `kubeconfig` (admin),
`apiserver`, `ca`, `kubelet_url`, `node`, `containerd_sock`, `k8s_bin`,
`metrics_server_kubeconfig` and `kubectl(*args) -> str`. When a realnode is already up
(`$REALNODE_DIR/env.sh`, default /tmp/realnode, and its API server answers) the tests use it
and leave it up; otherwise the fixture runs `<repo>/../shared/realnode/up.sh` (or
`$REALNODE_SCRIPTS/up.sh`) with the tier's settings (`node.UP_ENV`: HPAScaleToZero on, the
DaemonSet, StatefulSet and Job controllers) and `down.sh` at the end of the session. Not
Linux, not root, a Debian package missing: skipped with the reason, a failure under
`CI=true`.

Every test of the tier carries the `realnode` marker; `make test` leaves them out (the root
conftest deselects the marker unless `-m` names it) and `make test-node` runs them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.realnode.node import (
    DEFAULT_DIR,
    RealNode,
    bring_down,
    bring_up,
    find_realnode,
    missing_requirements,
)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the real-node tier: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def realnode() -> Iterator[RealNode]:
    """The realnode, up for the whole session (see the module)."""
    found = find_realnode(DEFAULT_DIR)
    if found is not None:
        yield found
        return
    problems = missing_requirements()
    if problems:
        _unavailable("; ".join(problems))
    started = bring_up(DEFAULT_DIR)
    try:
        yield started
    finally:
        bring_down(DEFAULT_DIR)
