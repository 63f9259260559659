"""Test-only entry point: the contract fixture behind `build_security`, on real uvicorn over TLS.

    python -m tests.security.serve_secure --secure-port 0 --cert-dir DIR [security flags...]

It does what `cli.py` will do once the security wiring lands there (see
`custom_metrics_server.security.options`), without touching `cli.py`: the same uvicorn settings
(httptools, uvloop, the protocol class that puts the peer certificate into the scope, the
reloading SSL context factory). It prints `serving on https://127.0.0.1:<port>` once bound.
`--fast-retries` shrinks the review retry backoff so failure tests stay quick.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import time
from pathlib import Path

import uvicorn
import yaml

from custom_metrics_server.backends.memory import MemoryBackend, load_fixture
from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.runtime.startup import as_startup_error, report_startup_failure
from custom_metrics_server.security.options import (
    SecurityConfigError,
    add_security_flags,
    build_security,
)
from custom_metrics_server.security.webhook import Backoff
from custom_metrics_server.server.app import create_app

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "contract.yaml"


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"serving on https://127.0.0.1:{port}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--secure-port", type=int, default=0)
    parser.add_argument("--cert-dir", type=Path, required=True)
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument("--demo", action="store_true")
    parser.add_argument("--fast-retries", action="store_true")
    parser.add_argument("--http", choices=["httptools", "h11"], default="httptools")
    parser.add_argument("--demo-pods", type=int, default=0, help="serve the simulated cluster")
    parser.add_argument("--demo-web-pods", type=int, default=None)
    add_security_flags(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.demo_pods else logging.DEBUG, stream=sys.stderr)
    for noisy in ("httpx", "httpcore", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    backoff = Backoff(duration=0.01, factor=1.5, jitter=0.2, steps=3) if args.fast_retries else None
    try:
        security = build_security(args, demo=args.demo, backoff=backoff)
    except SecurityConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    backend: MemoryBackend
    if args.demo_pods:
        backend = SimulatedCluster(
            DemoSettings(seed=42, pods=args.demo_pods, web_pods=args.demo_web_pods, interval=15.0)
        )
        cluster = backend.cluster
    else:
        cluster, backend = load_fixture(yaml.safe_load(FIXTURE.read_text()), now=time.time())
    app = create_app(cluster=cluster, backends=[backend], security=security)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.secure_port,
        ssl_context_factory=security.ssl_context_factory,
        http=security.protocol_class if args.http == "httptools" else security.h11_protocol_class,
        ws="none",
        loop="uvloop",
        lifespan="on",
        proxy_headers=False,
        server_header=False,
        access_log=False,
        log_config=None,
    )
    server = _Server(config)
    try:
        server.run()
    except SystemExit:  # uvicorn's exit after a failed lifespan: say why, as `serve` does
        if app.startup_error is not None:
            return report_startup_failure(as_startup_error(app.startup_error))
        raise
    return 0 if server.started else 3


if __name__ == "__main__":
    sys.exit(main())
