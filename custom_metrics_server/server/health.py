"""Health endpoints' bodies, in the format of the Go generic apiserver's healthz package.

PURE. `/livez` and `/healthz` pass while the process runs; `/readyz` also needs every backend
and the cluster view to have synced. A healthy non-verbose answer is `ok`; a verbose or failing
one lists each check (`[+]name ok` / `[-]name failed: ...`) and ends with
`<endpoint> check passed|failed`. Failures answer 500 as upstream. The failure reason is shown
only with `?verbose` (upstream withholds it; operators asked for it, see docs/operations.md), and
so is the note of a check that passes degraded (`[+]backend-prometheus ok (...)`): a backend that
lost its source keeps the server in rotation and says so there.
"""

from __future__ import annotations

from collections.abc import Mapping

from custom_metrics_server.domain import Readiness
from custom_metrics_server.runtime.asgi import NOT_FOUND_TEXT


def render(
    endpoint: str,
    checks: Mapping[str, Readiness],
    *,
    verbose: bool,
    exclude: frozenset[str] = frozenset(),
    only: str | None = None,
) -> tuple[int, str]:
    """(HTTP status, body) for `/{endpoint}` with the given named checks."""
    if only is not None:
        if only not in checks:
            return 404, NOT_FOUND_TEXT.decode()
        check = checks[only]
        if check.ready:
            return 200, "ok"
        return 500, f"internal server error: {check.reason or 'not ready'}\n"
    selected = {name: check for name, check in checks.items() if name not in exclude}
    healthy = all(check.ready for check in selected.values())
    if healthy and not verbose:
        return 200, "ok"
    lines = []
    for name, check in selected.items():
        if check.ready:
            # A ready check may carry a note (a backend serving degraded: last good data kept).
            note = f" ({check.reason})" if verbose and check.reason else ""
            lines.append(f"[+]{name} ok{note}")
        else:
            reason = check.reason if verbose and check.reason else "reason withheld"
            lines.append(f"[-]{name} failed: {reason}")
    lines.extend(f"[+]{name} excluded: ok" for name in sorted(exclude & checks.keys()))
    lines.append(f"{endpoint} check {'passed' if healthy else 'failed'}")
    return (200 if healthy else 500), "\n".join(lines) + "\n"
