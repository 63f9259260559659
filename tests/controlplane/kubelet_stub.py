"""A kubelet's `/metrics/resource` over HTTPS on 127.0.0.1, for the differential test: one
body, computed at each request, served alike to the servers beside the real and the fake API
server. (The real kubelet is the real-node tier's. kube-apiserver's node proxy refuses
loopback addresses, 400 "address not allowed", so the servers dial it directly:
`--kubelet-source=direct`.)

The body's counters grow at exact rates from the stub's start, in whole milliseconds, so the
CPU rate any two scrapes compute is exactly the configured one, whenever they happen.
"""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from custom_metrics_server.backends.demo_kubelets import ContainerUsage, kubelet_exposition
from tests.security.pki import CA

__all__ = ["Container", "KubeletStub", "kubelet_stub"]


@dataclass(frozen=True)
class Container:
    namespace: str
    pod: str
    name: str
    cores: float  # CPU rate
    memory: int  # working set, bytes


@dataclass
class KubeletStub:
    port: int
    ca_file: Path
    containers: list[Container]
    started_ms: int
    requests: int = 0

    def body(self) -> bytes:
        now_ms = int(time.time() * 1000)
        elapsed = (now_ms - self.started_ms) / 1000 + 60  # a minute of history at the start
        usage = [
            ContainerUsage(c.namespace, c.pod, c.name, c.cores * elapsed, c.memory, 0.0)
            for c in self.containers
        ]
        # `kubelet_exposition` stamps int(now * 1000) ms; half a millisecond more keeps float
        # division from landing on the millisecond before, which would skew the rate.
        return kubelet_exposition(
            usage, node_cpu_seconds=2 * elapsed, node_memory=2**31, now=(now_ms + 0.5) / 1000
        )


@contextmanager
def kubelet_stub(directory: Path, containers: list[Container]) -> Iterator[KubeletStub]:
    """The stub, serving until the block ends."""
    ca = CA("kubelet-ca", directory)
    cert = ca.serving(("127.0.0.1", "localhost"), file_name="kubelet")
    stub = KubeletStub(0, ca.cert_file, containers, int(time.time() * 1000))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stub.requests += 1
            if self.path.split("?")[0] != "/metrics/resource":
                self.send_error(404)
                return
            body = stub.body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert_file, cert.key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    stub.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
