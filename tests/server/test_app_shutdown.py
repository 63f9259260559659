"""Graceful termination of the real process (security.md checklist item 38).

SIGTERM: `/readyz` fails at once with the `shutdown` check, `/livez` passes, metric requests are
still served during `--shutdown-delay-duration` with `Connection: close`, then the process exits
0; a second SIGTERM ends it at once. Also the in-process half: `Server.begin_shutdown`.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import start_server
from tests.asgi import call, scope_for
from tests.conftest import contract_app

METRIC = (
    "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second"
    "?labelSelector=app%3Dweb"
)


async def test_begin_shutdown_fails_readyz_and_closes_connections() -> None:
    app = contract_app()
    before = await call(app, scope_for("GET", b"/apis"))
    assert "connection" not in before.headers
    app.begin_shutdown()
    ready = await call(app, scope_for("GET", b"/readyz", b"verbose"))
    assert ready.status == 500
    assert b"[-]shutdown failed: shutting down\n" in ready.body
    withheld = await call(app, scope_for("GET", b"/readyz"))
    assert b"[-]shutdown failed: reason withheld\n" in withheld.body
    assert (await call(app, scope_for("GET", b"/livez"))).status == 200
    served = await call(app, scope_for("GET", b"/apis"))
    assert served.status == 200
    assert served.headers["connection"] == "close"


def _reap(server: RunningServer) -> None:
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait(timeout=5)
    if server.process.stdout is not None:
        server.process.stdout.close()


def test_sigterm_fails_readyz_keeps_serving_for_the_delay_then_exits_0(tmp_path: Path) -> None:
    # The delay is long enough that "at once" (half of it) and "within the delay" stand apart
    # from a loaded machine's few hundred milliseconds.
    delay = 8.0
    server = start_server(tmp_path, "--shutdown-delay-duration", f"{delay:g}s")
    try:
        with server.client() as client:
            assert client.get("/readyz").status_code == 200
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            while client.get("/readyz").status_code == 200:
                assert time.monotonic() - signalled < delay / 2, "readyz did not fail at once"
            ready = client.get("/readyz?verbose")
            assert ready.status_code == 500
            assert "[-]shutdown failed: shutting down" in ready.text
            assert client.get("/livez").status_code == 200
            metric = client.get(METRIC)
            assert metric.status_code == 200
            assert metric.json()["kind"] == "MetricValueList"
            assert metric.headers["connection"] == "close"
            assert time.monotonic() - signalled < delay  # all of this within the delay
        assert server.process.wait(timeout=30) == 0
        assert time.monotonic() - signalled >= delay - 0.1  # it did wait for the delay
    finally:
        _reap(server)


def test_second_sigterm_exits_at_once(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--shutdown-delay-duration", "60s")
    try:
        with server.client() as client:
            server.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 5
            while client.get("/readyz").status_code == 200:
                assert time.monotonic() < deadline
        again = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == -signal.SIGTERM
        assert time.monotonic() - again < 20  # at once, not after the 60 s delay
    finally:
        _reap(server)
