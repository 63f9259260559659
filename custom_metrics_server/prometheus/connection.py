"""What a Prometheus client's connection needs from its `ServerConfig`: the TLS context, the
bearer token file (re-read when it
changes: projected tokens rotate), and the check that a configured header can be written.

Owns these settings; it must not send anything (`prometheus.client`). Cost: `TokenFile.token` is
one `stat` per call (the file is read only when its mtime or size changed); the rest runs once per
client.
"""

from __future__ import annotations

import os
import re
import ssl
from typing import Final

from custom_metrics_server.prometheus.rules import ServerConfig
from custom_metrics_server.runtime.tls import client_context

__all__ = ["TokenFile", "header_problem", "ssl_context"]


class TokenFile:
    """A bearer token file, re-read when its mtime or size changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[float, int] | None = None
        self._token = ""

    def token(self) -> str:
        """The token (the last one read when the file cannot be read now)."""
        try:
            status = os.stat(self.path)
        except OSError:
            return self._token
        stamp = (status.st_mtime, status.st_size)
        if stamp != self._stamp:
            try:
                with open(self.path, encoding="utf-8") as handle:
                    self._token = handle.read().strip()
                self._stamp = stamp
            except OSError:
                pass
        return self._token


def ssl_context(server: ServerConfig) -> ssl.SSLContext | None:
    """The TLS context of an https server (None for http)."""
    if not server.url.startswith("https://"):
        return None
    return client_context(
        server.ca_file,
        insecure=server.insecure_skip_verify,
        cert_file=server.client_cert_file,
        key_file=server.client_key_file,
    )


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def header_problem(name: str, value: str) -> str | None:
    """Why a header cannot be written as is, or None."""
    if not _TOKEN.fullmatch(name):
        return f"header name {name!r} is not an HTTP token"
    if any(char in value for char in "\r\n\x00"):
        return f"header {name!r} has a line break or NUL in its value"
    return None
