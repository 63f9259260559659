"""Environment proxies for the lean pool (`http11.Http11Pool`): which proxy, if any, an origin is
reached through, and the CONNECT tunnel to an `https://` origin.

The rules are Go's `net/http.ProxyFromEnvironment` (golang.org/x/net/http/httpproxy), which
every Kubernetes component and client-go follow, so an operator's environment means here what it
means to kubectl and metrics-server:

* `HTTPS_PROXY` for `https://` origins, `HTTP_PROXY` for `http://` ones, the upper-case name
  first, then the lower-case one; `ALL_PROXY` as the last fallback for both (httpx honours it,
  Go does not: the server honoured it before, through httpx, and still does). A proxy URL
  without a scheme is `http://`.
* `NO_PROXY` (then `no_proxy`): comma-separated entries; `*` bypasses every proxy; an IP
  address (optionally `ip:port` or `[ipv6]:port`) matches that address; a CIDR (`10.0.0.0/8`)
  matches every address in it; a domain (`example.com`, `*.example.com` alike) matches that
  name and every subdomain, `.example.com` the subdomains only, either optionally with
  `:port`. Entries match the URL's host as written (no DNS lookup).
* `localhost` and loopback addresses are never proxied (Go's rule; httpx would proxy them).

Where httpx differs (it prefers the lower-case name, and proxies loopback), Go's rule is
taken: a cluster's components should agree on where a request goes.

A proxy is `http://` or `https://` (TLS to the proxy, verified with the system's trust store);
credentials in its URL (`http://user:pass@proxy:3128`) are sent as `Proxy-Authorization:
Basic`. An `http://` origin is reached by sending the request to the proxy in absolute form
(`GET http://host:port/path`); an `https://` origin through a `CONNECT host:port` tunnel, in
which TLS is started with the origin's server name, so the proxy sees only the origin's name
and encrypted bytes.

Owns reading the environment and the tunnel's opening; it must not know the pool's
connections' state or any API. Cost: `environment_proxy` is O(environment + NO_PROXY entries),
once per pool; a tunnel adds one round trip to the proxy to each new connection.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit

__all__ = ["Proxy", "ProxyError", "authority", "bypassed", "environment_proxy", "open_tunnel"]

#: The CONNECT answer's head is read up to this many bytes (a proxy's answer is a few lines).
MAX_CONNECT_HEAD: Final = 16 << 10


class ProxyError(Exception):
    """The proxy refused the tunnel, or answered something that is not HTTP."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """Where a proxy is and what to tell it."""

    scheme: str  # "http" or "https"
    host: str
    port: int
    #: The `Proxy-Authorization` header line (with its CRLF), or b"".
    authorization: bytes = b""

    @property
    def shown(self) -> str:
        """The proxy as messages name it (never its credentials)."""
        return f"{self.scheme}://{authority(self.host, self.port)}"


def authority(host: str, port: int) -> str:
    """`host:port` as a request line or Host header writes it: an IPv6 address in brackets,
    an international name in its ASCII (IDNA) form."""
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_proxy(text: str) -> Proxy | None:
    """A proxy URL as Go reads it ("host:port" means "http://host:port"); None if empty.
    ValueError for a URL that is not a proxy's."""
    text = text.strip()
    if not text:
        return None
    if "://" not in text:
        text = "http://" + text
    url = urlsplit(text)
    scheme = url.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"proxy {scheme}:// is not supported (only http:// and https://)")
    if not url.hostname:
        raise ValueError(f"proxy URL {text!r} has no host")
    port = url.port or (443 if scheme == "https" else 80)
    authorization = b""
    if url.username is not None:
        userinfo = f"{unquote(url.username)}:{unquote(url.password or '')}"
        token = base64.b64encode(userinfo.encode()).decode("ascii")
        authorization = f"Proxy-Authorization: Basic {token}\r\n".encode("ascii")
    return Proxy(scheme, url.hostname, port, authorization)


def _first(environ: Mapping[str, str], *names: str) -> str:
    for name in names:
        value = environ.get(name, "")
        if value:
            return value
    return ""


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether `host:port` goes direct: Go's `useProxy` negated (see the module docstring).
    O(entries)."""
    host = host.strip().lower().strip("[]")
    if host == "localhost":
        return True
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_loopback:
        return True
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue  # Go ignores what does not parse
            if ip is not None and ip.version == network.version and ip in network:
                return True
            continue
        entry_host, entry_port = _split_entry(entry)
        if not entry_host:
            continue
        if entry_port and entry_port != str(port):
            continue
        try:
            entry_ip = ipaddress.ip_address(entry_host)
        except ValueError:
            entry_ip = None
        if entry_ip is not None:
            if ip is not None and ip == entry_ip:
                return True
            continue
        if entry_host.startswith("*."):
            entry_host = entry_host[1:]
        if entry_host.startswith("."):
            if host.endswith(entry_host):
                return True
        elif host == entry_host or host.endswith("." + entry_host):
            return True
    return False


def _split_entry(entry: str) -> tuple[str, str]:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address -> (host, port or "")."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else ""
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, port
    return entry, ""  # a name, or a bare IPv6 address


def environment_proxy(
    scheme: str, host: str, port: int, environ: Mapping[str, str] | None = None
) -> Proxy | None:
    """The proxy the environment names for `scheme://host:port`, or None (direct).
    ValueError when the variable that applies is not a usable proxy URL."""
    env = os.environ if environ is None else environ
    if scheme == "https":
        text = _first(env, "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
    else:
        text = _first(env, "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
    if not text or bypassed(host, port, _first(env, "NO_PROXY", "no_proxy")):
        return None
    return _parse_proxy(text)


class _ConnectAnswer(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT (its head, nothing more)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.head = bytearray()
        self.done: asyncio.Future[bytes] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end >= 0:
            if end + 4 != len(self.head):
                # The origin's bytes before our TLS hello: a proxy out of step.
                self.done.set_exception(ProxyError("the proxy sent bytes after its answer"))
            else:
                self.done.set_result(bytes(self.head[:end]))
        elif len(self.head) > MAX_CONNECT_HEAD:
            self.done.set_exception(ProxyError("the proxy's answer head is too long"))

    def eof_received(self) -> bool | None:
        self.connection_lost(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ProxyError(f"the proxy closed the connection: {exc or 'EOF'}"))


def _proxy_context() -> ssl.SSLContext:
    return ssl.create_default_context()


async def open_tunnel(
    loop: asyncio.AbstractEventLoop,
    protocol: asyncio.Protocol,
    proxy: Proxy,
    origin: tuple[str, int],
    *,
    ssl_context: ssl.SSLContext,
    server_hostname: str | None,
) -> asyncio.BaseTransport:
    """A TLS connection to `origin` (host, port) through `proxy`'s CONNECT tunnel, with
    `protocol` on it (its `connection_made` called). OSError or ssl.SSLError when the proxy
    cannot be reached, ProxyError when it refuses; the caller bounds the time."""
    host, port = origin
    opener = _ConnectAnswer(loop)
    transport, _ = await loop.create_connection(
        lambda: opener,
        proxy.host,
        proxy.port,
        ssl=_proxy_context() if proxy.scheme == "https" else None,
    )
    try:
        where = authority(host, port)
        transport.write(
            f"CONNECT {where} HTTP/1.1\r\nHost: {where}\r\n".encode("ascii")
            + proxy.authorization
            + b"\r\n"
        )
        head = await opener.done
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProxyError(f"the proxy's answer is not HTTP: {status_line[:80]!r}")
        if not 200 <= int(parts[1]) < 300:
            raise ProxyError(f"the proxy refused CONNECT {where}: {status_line[9:].strip()}")
        tls = await loop.start_tls(
            transport,
            protocol,
            ssl_context,
            server_hostname=server_hostname or host,
        )
    except BaseException:
        transport.close()
        raise
    assert tls is not None
    protocol.connection_made(tls)
    return tls
