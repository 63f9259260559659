"""Environment proxies in the lean pool (`http_client/proxy.py`, `http11.Http11Pool`): Go's
`NO_PROXY` rules, and calls through a real CONNECT proxy on a socket (below, written here: it
resolves the names it is asked for itself, as a proxy in front of a cluster does, and relays
bytes both ways), so a call that reaches its origin went through it. The origins are named
`*.test`, which no resolver knows: only the proxy can reach them."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Awaitable, Callable

import pytest
import trustme

from custom_metrics_server.http_client.http11 import Http11Pool, TransportError
from custom_metrics_server.http_client.proxy import bypassed, environment_proxy
from tests.http_client.connect_proxy import ConnectProxy
from tests.prometheus.scripted import Server, keep_alive

pytestmark = pytest.mark.usefixtures("clean_environment")

BODY = b"container_cpu_usage_seconds_total 1 2\n" * 20
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


@pytest.fixture
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for an origin named `kubelet.test`."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("kubelet.test").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


def test_no_proxy_follows_go_s_rules() -> None:
    # Go's httpproxy tests' cases (golang.org/x/net/http/httpproxy/proxy_test.go), by kind.
    cases = [
        ("example.com", 443, "", False),
        ("localhost", 443, "", True),  # never proxied
        ("127.0.0.2", 443, "", True),  # loopback, never proxied
        ("::1", 443, "", True),
        ("example.com", 443, "*", True),
        ("any.where", 80, " * ", True),
        ("example.com", 443, "example.com", True),  # the name
        ("sub.example.com", 443, "example.com", True),  # and its subdomains
        ("sub.example.com", 443, "*.example.com", True),
        ("notexample.com", 443, "example.com", False),  # not a suffix of the label
        ("example.com", 443, ".example.com", False),  # a leading dot: subdomains only
        ("a.example.com", 443, ".example.com", True),
        ("EXAMPLE.com", 443, "Example.COM", True),
        ("example.com", 443, "example.com:443", True),
        ("example.com", 10250, "example.com:443", False),  # another port
        ("10.1.2.3", 10250, "10.0.0.0/8", True),  # CIDR
        ("11.1.2.3", 10250, "10.0.0.0/8", False),
        ("10.1.2.3", 10250, "10.1.2.3", True),
        ("10.1.2.3", 10250, "10.1.2.3:10250", True),
        ("10.1.2.3", 10250, "10.1.2.3:443", False),
        ("2001:db8::1", 443, "2001:db8::/32", True),
        ("2001:db8::1", 443, "[2001:db8::1]:443", True),
        ("2001:db8::1", 443, "2001:db8::1", True),
        ("10.1.2.3", 443, "not-a-cidr/99, ,example.com", False),  # junk is ignored
        ("node-1.cluster.local", 10250, "foo.bar, .cluster.local", True),
    ]
    for host, port, no_proxy, expected in cases:
        assert bypassed(host, port, no_proxy) is expected, (host, port, no_proxy)


def test_which_variable_names_the_proxy() -> None:
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}
    proxy = environment_proxy("https", "example.com", 443, env)
    assert proxy is not None
    assert (proxy.host, proxy.port) == ("upper", 1)  # Go: the upper-case name first
    proxy = environment_proxy("http", "example.com", 80, {"http_proxy": "proxy.corp:3128"})
    assert proxy is not None
    assert (proxy.scheme, proxy.host, proxy.port) == ("http", "proxy.corp", 3128)
    proxy = environment_proxy("https", "example.com", 443, {"ALL_PROXY": "https://all"})
    assert proxy is not None
    assert (proxy.scheme, proxy.port) == ("https", 443)
    assert environment_proxy("https", "example.com", 443, {"HTTP_PROXY": "http://p:1"}) is None
    assert (
        environment_proxy("https", "e.com", 443, {"HTTPS_PROXY": "p:1", "no_proxy": "e.com"})
        is None
    )
    with pytest.raises(ValueError, match="socks5"):
        environment_proxy("https", "example.com", 443, {"HTTPS_PROXY": "socks5://p:1080"})


async def test_an_https_origin_is_reached_through_a_connect_tunnel(
    serve: Callable[..., Awaitable[Server]],
    proxy: ConnectProxy,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_context, client_context = tls
    origin = await serve(keep_alive(ANSWER), ssl_context=server_context)
    proxy.origin_port = origin.port
    monkeypatch.setenv("HTTPS_PROXY", f"http://ops:s%40cret@127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "example.com,10.0.0.0/8")
    pool = Http11Pool(
        host="kubelet.test", port=origin.port, ssl_context=client_context, timeout=5.0
    )
    head = b"GET /metrics/resource HTTP/1.1\r\nHost: kubelet.test\r\n\r\n"
    for _ in range(3):
        answer = await pool.request(head)
        assert (answer.status, answer.body) == (200, BODY)
    await pool.aclose()
    # One tunnel for three calls (kept alive through it), to the origin's name and port, with
    # the proxy's credentials; the origin's server name was verified inside (its certificate
    # names only kubelet.test) and the proxy relayed only ciphertext.
    assert len(proxy.heads) == 1
    tunnel = proxy.heads[0]
    assert tunnel.startswith(f"CONNECT kubelet.test:{origin.port} HTTP/1.1\r\n".encode())
    credentials = base64.b64encode(b"ops:s@cret")
    assert b"Proxy-Authorization: Basic " + credentials + b"\r\n" in tunnel
    assert origin.connections == 1
    assert len(origin.heads) == 3
    assert len(proxy.relayed) > 3 * len(head)
    assert b"/metrics/resource" not in proxy.relayed


async def test_the_tunnel_verifies_the_origin_s_name_not_the_proxy_s(
    serve: Callable[..., Awaitable[Server]],
    proxy: ConnectProxy,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_context, client_context = tls
    origin = await serve(keep_alive(ANSWER), ssl_context=server_context)
    proxy.origin_port = origin.port
    monkeypatch.setenv("https_proxy", f"127.0.0.1:{proxy.port}")
    # The proxy leads kubelet-2.test to the origin, whose certificate does not name it.
    pool = Http11Pool(host="kubelet-2.test", port=origin.port, ssl_context=client_context)
    with pytest.raises(TransportError, match="certificate"):
        await pool.request(b"GET / HTTP/1.1\r\nHost: kubelet-2.test\r\n\r\n")
    assert proxy.heads[0].startswith(b"CONNECT kubelet-2.test:")
    await pool.aclose()


async def test_an_http_origin_gets_requests_in_absolute_form(
    serve: Callable[..., Awaitable[Server]], proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = await serve(keep_alive(ANSWER))
    proxy.origin_port = origin.port
    monkeypatch.setenv("HTTP_PROXY", f"http://ops:pw@127.0.0.1:{proxy.port}")
    pool = Http11Pool(host="metrics.test", port=8080, ssl_context=None)
    answer = await pool.request(b"GET /metrics?x=1 HTTP/1.1\r\nHost: metrics.test:8080\r\n\r\n")
    assert (answer.status, answer.body) == (200, BODY)
    await pool.aclose()
    assert proxy.heads == [
        b"GET http://metrics.test:8080/metrics?x=1 HTTP/1.1\r\n"
        b"Proxy-Authorization: Basic " + base64.b64encode(b"ops:pw") + b"\r\n"
        b"Host: metrics.test:8080\r\n\r\n"
    ]
    assert origin.heads == proxy.heads  # what the proxy forwarded, as it got it


async def test_no_proxy_goes_direct(
    serve: Callable[..., Awaitable[Server]],
    proxy: ConnectProxy,
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_context, client_context = tls
    origin = await serve(keep_alive(ANSWER), ssl_context=server_context)
    proxy.origin_port = origin.port
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "other.example, .test")
    pool = Http11Pool(host="kubelet.test", port=origin.port, ssl_context=client_context)
    assert pool.proxy is None
    # Direct, kubelet.test is nowhere: only the proxy could have reached it.
    with pytest.raises(TransportError, match="cannot connect"):
        await pool.request(b"GET / HTTP/1.1\r\nHost: kubelet.test\r\n\r\n")
    await pool.aclose()
    # And a loopback origin goes direct whatever the proxy variables say.
    local = Http11Pool(host="127.0.0.1", port=origin.port, ssl_context=None)
    assert local.proxy is None
    assert proxy.heads == []


async def test_a_refused_tunnel_or_an_unusable_proxy_is_a_transport_error(
    proxy: ConnectProxy, tls: tuple[ssl.SSLContext, ssl.SSLContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client_context = tls
    proxy.refuse = b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    pool = Http11Pool(host="kubelet.test", port=10250, ssl_context=client_context)
    with pytest.raises(TransportError, match="407 Proxy Authentication Required"):
        await pool.request(b"GET / HTTP/1.1\r\nHost: kubelet.test\r\n\r\n")
    await pool.aclose()
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    pool = Http11Pool(host="kubelet.test", port=10250, ssl_context=client_context)
    with pytest.raises(TransportError, match=r"proxy: proxy socks5:// is not supported"):
        await pool.request(b"GET / HTTP/1.1\r\nHost: kubelet.test\r\n\r\n")
    await pool.aclose()


async def test_a_pool_that_does_not_trust_the_environment_goes_direct(
    serve: Callable[..., Awaitable[Server]], proxy: ConnectProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trust_env=False` (the pod scraper's direct pools): the proxy variables are not read."""
    origin = await serve(keep_alive(ANSWER))
    proxy.origin_port = origin.port
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    pool = Http11Pool(host="metrics.test", port=origin.port, ssl_context=None, trust_env=False)
    with pytest.raises(TransportError, match="cannot connect"):
        await pool.request(b"GET / HTTP/1.1\r\nHost: metrics.test\r\n\r\n")
    await pool.aclose()
    assert proxy.heads == []
    trusting = Http11Pool(host="metrics.test", port=origin.port, ssl_context=None)
    assert (await trusting.request(b"GET / HTTP/1.1\r\nHost: metrics.test\r\n\r\n")).body == BODY
    await trusting.aclose()
    assert len(proxy.heads) == 1
