"""Tests for custom_metrics_server.scraping.kubelet_scraper (with kubelet_client and scrape_nodes): the
scraper against a local HTTP server that answers the API server's node-proxy paths (and the
kubelet's own path, for direct mode) with kubelet text, per node: counters that move, errors,
slowness.

Timing tests use short intervals and generous tolerances: the machine may be loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
import trustme

from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.scraping.failure import ScrapeFailure
from custom_metrics_server.scraping.kubelet_scraper import AGE_OUT_INTERVALS, KubeletScraper
from custom_metrics_server.usage.store import UsageStore

PROXY_PATH = re.compile(r"^/api/v1/nodes/([^/]+)/proxy/metrics/resource$")


@dataclass
class FakeNode:
    """What one node's kubelet answers: a body built from its scrape count, an HTTP
    status, a delay before answering."""

    status: int = 200
    delay: float = 0.0
    body: Callable[[int], bytes] | None = None
    requests: list[float] = field(default_factory=list)


def kubelet_text(node: str, scrape: int, at_ms: int) -> bytes:
    """A kubelet body whose counters grow by 0.5 s (container) and 2 s (node) per scrape
    and whose samples are stamped ``at_ms``."""
    labels = f'container="app",namespace="default",pod="{node}-pod"'
    return (
        "# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time\n"
        "# TYPE container_cpu_usage_seconds_total counter\n"
        f"container_cpu_usage_seconds_total{{{labels}}} {1 + scrape * 0.5} {at_ms}\n"
        f"container_memory_working_set_bytes{{{labels}}} 1048576 {at_ms}\n"
        f"node_cpu_usage_seconds_total {10 + scrape * 2} {at_ms}\n"
        f"node_memory_working_set_bytes 2e+09 {at_ms}\n"
        "resource_scrape_error 0\n"
    ).encode()


class FakeApiServer:
    """A minimal HTTP/1.1 server (keep-alive, GET only) in the test's event loop."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.nodes: dict[str, FakeNode] = {}
        self.direct_node = ""  # who answers the kubelet's own path (direct mode)
        self.authorizations: list[str] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._clock_ms = 1_700_000_000_000
        self._connections: set[asyncio.StreamWriter] = set()
        self.in_flight = 0  # node requests being answered now
        self.max_in_flight = 0

    def add(self, name: str, **kwargs: object) -> FakeNode:
        self.nodes[name] = node = FakeNode(**kwargs)  # type: ignore[arg-type]
        return node

    async def __aenter__(self) -> FakeApiServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._connections):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                found = re.search(rb"(?im)^authorization: *(.*?)\r$", head)
                self.authorizations.append(found.group(1).decode() if found else "")
                # A client that gives up closes the connection: stop answering then, as a
                # real server's handler would, so `in_flight` counts live requests only.
                answer = asyncio.ensure_future(self._answer(target))
                hangup = asyncio.ensure_future(reader.read(1))
                await asyncio.wait([answer, hangup], return_when=asyncio.FIRST_COMPLETED)
                if not answer.done():
                    answer.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await answer
                    return
                hangup.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await hangup  # its read must end before the next request is read
                status, body = answer.result()
                writer.write(
                    f"HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _answer(self, target: str) -> tuple[int, bytes]:
        match = PROXY_PATH.match(target)
        if match:
            name = match.group(1)
        elif target == "/metrics/resource":
            name = self.direct_node
        else:
            return 404, b"not found"
        node = self.nodes.get(name)
        if node is None:
            return 404, b'{"kind":"Status","reason":"NotFound","message":"nodes not found"}'
        node.requests.append(asyncio.get_running_loop().time())
        if node.delay:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                await asyncio.sleep(node.delay)
            finally:
                self.in_flight -= 1
        if node.status != 200:
            return node.status, b'{"kind":"Status","reason":"InternalError","message":"boom"}'
        self._clock_ms += 1000
        scrape = len(node.requests)
        body = node.body(scrape) if node.body else kubelet_text(name, scrape, self._clock_ms)
        return 200, body


@pytest.fixture
async def server() -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer() as running:
        yield running


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[KubeClient]:
    kube = KubeClient(Connection(host=f"http://127.0.0.1:{server.port}"))
    yield kube
    await kube.aclose()


async def wait_for(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Poll until ``condition`` holds (fails the test after ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def failing_nodes(scraper: KubeletScraper) -> dict[str, str]:
    """Nodes whose last scrape failed, with the reason."""
    return {name: reason for name, (reason, _) in scraper.nodes.failing().items()}


def scraper(
    client: KubeClient, store: UsageStore, nodes: list[str], **kwargs: object
) -> KubeletScraper:
    options: dict[str, object] = {"interval": 0.4, "timeout": 0.3} | kwargs
    return KubeletScraper(client, nodes=lambda: nodes, store=store, **options)  # type: ignore[arg-type]


async def test_every_node_is_scraped_through_the_node_proxy_into_the_store(
    server: FakeApiServer, client: KubeClient
) -> None:
    for name in ("n1", "n2"):
        server.add(name)
    store = UsageStore()
    async with scraper(client, store, ["n1", "n2"]) as running:
        await wait_for(lambda: store.pod_usage("default", "n2-pod") is not None)
        usage = store.pod_usage("default", "n1-pod")
        assert usage is not None
        # 0.5 s of CPU per scrape over the fake clock's 1 s per request, per node.
        assert usage.cpu_cores == pytest.approx(0.5 / (usage.window), rel=1e-9)
        assert usage.memory_bytes == 1048576.0
        node = store.node_usage("n1")
        assert node is not None
        assert node.cpu_cores == pytest.approx(2.0 / node.window)
        assert running.stats().failures == 0
        assert running.readiness().ready


async def test_node_starts_are_spread_over_the_interval_after_the_first_round(
    server: FakeApiServer, client: KubeClient
) -> None:
    names = [f"n{i}" for i in range(4)]
    for name in names:
        server.add(name)
    # A deadline well above a loaded machine's connection set-up: a scrape that timed out
    # would first reach the server a round later. The interval is long enough that each
    # defect costs seconds while a loaded machine delays a start by a few hundred ms.
    async with scraper(client, UsageStore(), names, interval=4.0, timeout=1.0):
        await wait_for(lambda: all(len(server.nodes[n].requests) >= 2 for n in names), within=20.0)
    # The first round starts every scrape at once: usage is wanted first thing (spread like
    # the later rounds, the last would start 1.5 s after the first).
    firsts = [server.nodes[n].requests[0] for n in names]
    assert max(firsts) - min(firsts) < 0.75, firsts
    # Later rounds: node i starts i * interval / 2n into the round (the first half), 0.5 s
    # apart, least recently attempted first (any order here: they all went at once). All at
    # once would be 0 s apart; spread over the whole interval, the last would start at 3 s.
    seconds = sorted(server.nodes[n].requests[1] for n in names)
    gaps = [later - earlier for earlier, later in pairwise(seconds)]
    assert all(gap >= 0.25 for gap in gaps), gaps
    assert 1.0 <= seconds[-1] - seconds[0] <= 2.25, seconds


async def test_each_node_is_scraped_once_per_interval(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1")
    # Rounds run on fixed ticks 1 s apart: a tick delayed by load shortens the next period by
    # as much, so the bounds leave 0.4 s either way; twice a round (0.5 s) or every other
    # round (2 s) is outside them.
    async with scraper(client, UsageStore(), ["n1"], interval=1.0, timeout=0.5):
        await wait_for(lambda: len(server.nodes["n1"].requests) >= 4, within=20.0)
    times = server.nodes["n1"].requests
    periods = [b - a for a, b in pairwise(times)]
    assert all(0.6 <= period <= 1.6 for period in periods), periods


async def test_a_slow_node_times_out_without_holding_up_the_others(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("fast")
    server.add("slow", delay=6.0)
    store = UsageStore()
    async with scraper(client, store, ["fast", "slow"], interval=0.5, timeout=0.2) as running:
        await wait_for(lambda: running.stats().rounds_completed >= 1)
        stats = running.stats()
        assert stats.failures_by_reason.get("timeout", 0) >= 1
        # The round ended about one timeout (0.2 s) after the slow node's start, not when the
        # slow node answers (6 s later).
        assert stats.last_round_seconds is not None
        assert stats.last_round_seconds < 3.0
        await wait_for(lambda: store.pod_usage("default", "fast-pod") is not None)
        assert store.pod_usage("default", "slow-pod") is None
        assert failing_nodes(running) == {"slow": "timeout"}


@pytest.mark.parametrize("source", ["proxy", "direct"])
async def test_a_body_over_the_cap_is_a_too_large_failure_read_no_further(
    server: FakeApiServer, client: KubeClient, source: str
) -> None:
    # Checklist item 35: a huge backend body is refused at the cap, the node's usage is not
    # taken from it, and other nodes are unaffected.
    cap = 64 << 10
    padding = b"# " + b"x" * (cap + 1) + b"\n"
    huge = server.add("huge", body=lambda scrape: padding + kubelet_text("huge", scrape, 1))
    server.add("fine")
    server.direct_node = "huge"
    store = UsageStore()
    extra: dict[str, object] = {}
    if source == "direct":
        extra = {
            "kubelet_scheme": "http",
            "kubelet_port": server.port,
            "node_address": {"huge": "127.0.0.1"}.get,
        }
    nodes = ["huge", "fine"] if source == "proxy" else ["huge"]
    async with scraper(
        client, store, nodes, interval=0.2, source=source, max_body_bytes=cap, **extra
    ) as running:
        await wait_for(lambda: running.stats().failures_by_reason.get("too_large", 0) >= 2)
        assert failing_nodes(running) == {"huge": "too_large"}
        assert store.pod_usage("default", "huge-pod") is None
        if source == "proxy":
            await wait_for(lambda: store.pod_usage("default", "fine-pod") is not None)
    assert huge.requests


async def test_a_failing_node_is_logged_once_and_again_when_it_recovers(
    server: FakeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    node = server.add("flaky", status=500)
    store = UsageStore()
    caplog.set_level(logging.DEBUG, logger="custom_metrics_server.scraping.kubelet_scraper")
    # A round of 0.3 s: the 500 answers well within it even on a loaded machine (a deadline
    # of the round's length would make the first failure a timeout instead).
    async with scraper(client, store, ["flaky"], interval=0.3, timeout=0.5) as running:
        await wait_for(lambda: running.stats().failures >= 3)
        node.status = 200
        await wait_for(lambda: store.pod_usage("default", "flaky-pod") is not None)
        stats = running.stats()
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "node " in r.getMessage()
    ]
    recoveries = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(warnings) == 1
    assert "flaky" in warnings[0].getMessage()
    assert "http_500" in warnings[0].getMessage()
    assert len(recoveries) == 1
    assert recoveries[0].levelno == logging.INFO
    assert stats.failures_by_reason["http_500"] >= 3
    assert stats.targets_failing == 0


async def test_a_node_that_stops_answering_ages_out_after_three_intervals(
    server: FakeApiServer, client: KubeClient
) -> None:
    node = server.add("n1")
    server.add("n2")
    store = UsageStore()
    # n2 must answer every round meanwhile: a deadline of half a second, not 0.15 s, keeps a
    # loaded machine from ageing out the healthy node too.
    interval = 1.0
    async with scraper(client, store, ["n1", "n2"], interval=interval, timeout=0.5) as running:
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is not None)
        node.status = 503
        failed_at = asyncio.get_running_loop().time()
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is None, within=15.0)
        gone_after = asyncio.get_running_loop().time() - failed_at
        assert store.node_usage("n1") is None
        assert store.pod_usage("default", "n2-pod") is not None
        assert running.stats().expired >= 1
    assert gone_after >= (AGE_OUT_INTERVALS - 1) * interval


async def test_a_node_that_leaves_the_node_list_is_forgotten_at_once(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1")
    server.add("n2")
    listed = ["n1", "n2"]
    store = UsageStore()
    async with KubeletScraper(client, nodes=lambda: listed, store=store, interval=2.0, timeout=1.0):
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is not None)
        listed.remove("n1")
        # Forgotten by the next round (2 s away at most), not aged out after
        # AGE_OUT_INTERVALS rounds without an answer (6 s).
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is None, within=4.0)
        assert "n1" not in store.nodes()


async def test_readiness_waits_for_the_first_round_and_says_when_no_node_answered(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1", status=403)
    server.add("n2", status=403)
    running = scraper(client, UsageStore(), ["n1", "n2"], interval=1.0, timeout=0.2)
    assert not running.readiness().ready
    async with running:
        assert not running.readiness().ready
        await wait_for(lambda: running.stats().rounds_completed >= 1)
        readiness = running.readiness()
    assert readiness.ready
    assert "0 of 2" in readiness.reason


async def test_readiness_says_usage_is_partly_there_until_a_second_answer(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1")
    server.add("n2", status=500)
    async with scraper(client, UsageStore(), ["n1", "n2"], interval=0.4) as running:
        await wait_for(lambda: running.stats().rounds_completed >= 1)
        first = running.readiness()
        await wait_for(lambda: running.stats().rounds_completed >= 2)
        second = running.readiness()
    assert first.ready
    assert first.reason.startswith("usage partly available: kubelets answered one scrape round")
    assert "CPU rates need a second answer (next round within 0.4s)" in first.reason
    assert second.ready
    assert second.reason == ""


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param(
            b"resource_scrape_error 1\nscrape_error 1\n", "kubelet_error", id="kubelet-error"
        ),
        pytest.param(b"container_cpu_usage_seconds_total{} x\n", "parse", id="unparsable"),
    ],
)
async def test_bodies_without_usage_count_as_failures_and_keep_the_last_usage(
    server: FakeApiServer, client: KubeClient, body: bytes, reason: str
) -> None:
    node = server.add("n1")
    store = UsageStore()
    async with scraper(client, store, ["n1"], interval=0.15) as running:
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is not None)
        node.body = lambda _: body
        await wait_for(lambda: running.stats().failures_by_reason.get(reason, 0) >= 1)
        assert store.pod_usage("default", "n1-pod") is not None


async def test_direct_mode_reads_the_kubelet_port_of_each_node_s_address(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1")
    addresses = {"n1": "127.0.0.1", "n2": None}
    store = UsageStore()
    server.direct_node = "n1"
    kube = KubeClient(Connection(host=f"http://127.0.0.1:{server.port}", token="sa-token"))
    async with scraper(
        kube,
        store,
        ["n1", "n2"],
        interval=0.2,
        source="direct",
        kubelet_scheme="http",
        kubelet_port=server.port,
        node_address=addresses.get,
    ) as running:
        await wait_for(lambda: store.pod_usage("default", "n1-pod") is not None)
        # scrapes are staggered: n1 may succeed before n2's first attempt has failed
        await wait_for(lambda: bool(failing_nodes(running)))
        assert failing_nodes(running) == {"n2": "no_address"}
        assert running.stats().failures_by_reason["no_address"] >= 1
    await kube.aclose()
    # The kubelet client the scraper built sends the service-account token.
    assert set(server.authorizations) == {"Bearer sa-token"}


async def test_an_unreachable_api_server_is_a_counted_failure() -> None:
    dead = KubeClient(Connection(host="http://127.0.0.1:9"))
    try:
        running = KubeletScraper(dead, nodes=lambda: ["n1"], store=UsageStore(), timeout=1.0)
        assert await running.scrape_node("n1") is False
        assert failing_nodes(running) == {"n1": "unreachable"}
    finally:
        await dead.aclose()


async def test_scrape_node_can_be_called_alone_and_a_listing_error_skips_the_round(
    server: FakeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    server.add("n1")
    store = UsageStore()
    calls = 0

    def broken() -> list[str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("informer not synced")

    running = KubeletScraper(client, nodes=broken, store=store, interval=0.1)
    assert await running.scrape_node("n1") is True
    assert store.nodes() == ["n1"]
    async with running:
        await wait_for(lambda: calls >= 2)
    assert running.stats().rounds_started == 0
    assert "listing the nodes" in caplog.text
    assert store.nodes() == ["n1"]  # nothing was forgotten because of the error


async def test_invalid_settings_are_refused() -> None:
    kube = KubeClient(Connection(host="http://127.0.0.1:9"))
    with pytest.raises(ValueError, match="node_address"):
        KubeletScraper(kube, nodes=list, store=UsageStore(), source="direct")
    with pytest.raises(ValueError, match="positive"):
        KubeletScraper(kube, nodes=list, store=UsageStore(), interval=0)
    with pytest.raises(ValueError, match="source"):
        KubeletScraper(kube, nodes=list, store=UsageStore(), source="sideways")  # type: ignore[arg-type]
    await kube.aclose()


@pytest.mark.parametrize(
    ("trust", "answers"),
    [
        pytest.param("ca", True, id="kubelet-ca"),
        pytest.param("none", False, id="unknown-ca"),
        pytest.param("insecure", True, id="insecure-tls"),
    ],
)
async def test_direct_mode_verifies_the_kubelet_certificate_unless_told_not_to(
    tmp_path: Path, trust: str, answers: bool
) -> None:
    authority = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "kubelet-ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    async with FakeApiServer(tls=context) as server:
        server.add("n1")
        server.direct_node = "n1"
        kube = KubeClient(Connection(host="https://127.0.0.1:1"))
        running = KubeletScraper(
            kube,
            nodes=list,
            store=UsageStore(),
            source="direct",
            kubelet_port=server.port,
            node_address=lambda _: "127.0.0.1",
            kubelet_ca_file=str(ca_file) if trust == "ca" else None,
            kubelet_insecure_tls=trust == "insecure",
            timeout=2.0,
        )
        async with running:
            assert await running.scrape_node("n1") is answers
        await kube.aclose()
    assert failing_nodes(running) == ({} if answers else {"n1": "unreachable"})


def test_scrape_failures_carry_a_reason() -> None:
    failure = ScrapeFailure("timeout", "no answer")
    assert (failure.reason, str(failure)) == ("timeout", "no answer")


async def test_leaving_the_context_stops_all_scrapes(
    server: FakeApiServer, client: KubeClient
) -> None:
    node = server.add("n1", delay=0.5)
    async with scraper(client, UsageStore(), ["n1"], interval=0.1, timeout=2.0):
        await wait_for(lambda: bool(node.requests))
    count = len(node.requests)
    await asyncio.sleep(0.3)
    assert len(node.requests) == count


async def test_no_more_than_the_concurrency_is_in_flight_and_a_late_round_delays_the_next(
    server: FakeApiServer, client: KubeClient
) -> None:
    # Nodes that hang: one slot, three nodes. The round cannot start them all before the next
    # tick; the rest wait for a later round instead of piling up, and rounds never overlap.
    names = ["h0", "h1", "h2"]
    for name in names:
        server.add(name, delay=1.0)
    async with scraper(
        client, UsageStore(), names, interval=0.2, timeout=1.0, concurrency=1
    ) as running:
        await wait_for(lambda: running.stats().rounds_overrun >= 1 and running.stats().deferred)
        await wait_for(lambda: all(server.nodes[n].requests for n in names))
        stats = running.stats()
    assert server.max_in_flight == 1
    assert stats.failures_by_reason["timeout"] >= 2
    assert stats.in_flight <= 1


async def test_nodes_that_keep_failing_are_retried_with_exponential_backoff(
    server: FakeApiServer, client: KubeClient
) -> None:
    broken = server.add("broken", status=500)
    fine = server.add("fine")
    async with scraper(client, UsageStore(), ["broken", "fine"], interval=0.05) as running:
        await wait_for(lambda: len(fine.requests) >= 24, within=10.0)
        stats = running.stats()
    # Rounds 0, 1, 3, 7, 15, 23, ...: about five attempts in 24 rounds instead of 24.
    assert 3 <= len(broken.requests) <= 7, len(broken.requests)
    assert stats.targets_backing_off == 1
    assert stats.targets_failing == 1


async def test_failing_nodes_take_at_most_a_quarter_of_the_slots(
    server: FakeApiServer, client: KubeClient
) -> None:
    # First round: every node fails fast (status 500). Then they all hang: as failing nodes
    # they may hold only 4 // 4 = 1 slot, so the healthy node always finds one.
    hangers = [server.add(f"f{i}", status=500) for i in range(6)]
    healthy = server.add("ok")
    names = [f"f{i}" for i in range(6)] + ["ok"]
    store = UsageStore()
    async with scraper(client, store, names, interval=0.3, timeout=2.0, concurrency=4) as running:
        await wait_for(lambda: running.stats().targets_failing == 6)
        for node in hangers:
            node.status, node.delay = 200, 5.0
        server.max_in_flight = 0
        seen = len(healthy.requests)
        await wait_for(lambda: len(healthy.requests) >= seen + 3, within=5.0)
    assert server.max_in_flight == 1


async def test_the_first_round_starts_as_soon_as_the_node_list_has_synced(
    server: FakeApiServer, client: KubeClient
) -> None:
    server.add("n1")
    synced = asyncio.Event()
    running = KubeletScraper(
        client,
        nodes=lambda: ["n1"],
        store=UsageStore(),
        interval=30.0,
        timeout=1.0,
        nodes_synced=synced.wait,
    )
    async with running:
        await asyncio.sleep(0.2)
        assert server.nodes["n1"].requests == []
        assert not running.readiness().ready
        synced.set()
        # Not a whole interval (30 s) later: at once (half the interval for a loaded machine).
        await wait_for(lambda: running.readiness().ready, within=15.0)
    assert len(server.nodes["n1"].requests) == 1


async def test_scrapes_use_their_own_connection_pool(server: FakeApiServer) -> None:
    # The client handed in (the watches' and reviews' pool) has one connection, held by a
    # request that hangs; the scraper's requests still go out at once on its own pool.
    server.add("stuck", delay=5.0)
    server.add("n1")
    shared = KubeClient(Connection(host=f"http://127.0.0.1:{server.port}"), max_connections=1)
    hanging = asyncio.create_task(shared.get_bytes("/api/v1/nodes/stuck/proxy/metrics/resource"))
    await wait_for(lambda: bool(server.nodes["stuck"].requests))
    store = UsageStore()
    try:
        running = KubeletScraper(shared, nodes=lambda: ["n1"], store=store, timeout=1.0)
        async with running:
            assert await running.scrape_node("n1") is True
    finally:
        hanging.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await hanging
        await shared.aclose()


async def test_many_nodes_failing_at_once_are_summed_up_in_one_line(
    server: FakeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    names = [f"n{i:02d}" for i in range(12)]
    for name in names:
        server.add(name, status=503)
    caplog.set_level(logging.INFO, logger="custom_metrics_server.scraping.kubelet_scraper")
    async with scraper(client, UsageStore(), names, interval=0.5) as running:
        await wait_for(lambda: running.stats().rounds_completed >= 1)
    per_node = [r for r in caplog.records if "scraping the kubelet of node" in r.getMessage()]
    summaries = [r for r in caplog.records if "started failing" in r.getMessage()]
    assert len(per_node) == 5
    assert len(summaries) == 1
    assert "12 of 12 listed node(s) started failing (http_503 12)" in summaries[0].getMessage()


async def test_nodes_that_join_are_scraped_at_once_not_at_the_next_round(
    server: FakeApiServer, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The node list synced empty (or a node joins later): the node is scraped as soon as the
    watch reports it, not a whole interval later; nodes already scraped are not scraped again."""
    server.add("n1")
    server.add("n2")
    nodes: list[str] = []
    running = KubeletScraper(
        client, nodes=lambda: nodes, store=UsageStore(), interval=30.0, timeout=1.0
    )
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.INFO, logger="custom_metrics_server.scraping.kubelet_scraper"):
        async with running:
            await wait_for(lambda: running.stats().rounds_completed >= 1)
            assert running.readiness() == Readiness(
                False, "usage not available yet: no node is listed"
            )
            nodes.append("n1")
            joined = loop.time()
            running.notice_nodes()
            await wait_for(lambda: running.readiness().ready, within=20.0)
            took = loop.time() - joined
            running.notice_nodes()  # nothing new: no scrape
            nodes.append("n2")
            running.notice_nodes()
            await wait_for(lambda: bool(server.nodes["n2"].requests), within=5.0)
            await asyncio.sleep(0.2)
    assert took < 10.0  # at once, not at the next round 30 s away
    assert len(server.nodes["n1"].requests) == 1
    assert len(server.nodes["n2"].requests) == 1
    assert running.stats().rounds_completed == 1  # no round ran: both were catch-ups
    first = [r.getMessage() for r in caplog.records if "first kubelet" in r.getMessage()]
    assert len(first) == 1
    assert first[0].startswith("first kubelet scrape round done: 1 of 1 nodes answered in ")


async def test_a_failing_node_that_becomes_reachable_is_scraped_at_once(
    server: FakeApiServer, client: KubeClient
) -> None:
    """A node whose scrapes failed (its agent was not there yet, or its kubelet was down) is
    scraped as soon as the watch says it became reachable, not after its backoff or at the
    next round; a node in good standing is not scraped again for it."""
    down = server.add("down", status=503)
    server.add("fine")
    running = KubeletScraper(
        client, nodes=lambda: ["down", "fine"], store=UsageStore(), interval=3600.0, timeout=1.0
    )
    async with running:
        await wait_for(lambda: running.stats().rounds_completed >= 1, within=60.0)
        assert failing_nodes(running) == {"down": "http_503"}
        down.status = 200
        running.notice_nodes(["down", "fine", "unlisted"])
        await wait_for(lambda: not running.nodes.is_failing("down"), within=60.0)
        stats = running.stats()
    assert len(down.requests) == 2
    assert len(server.nodes["fine"].requests) == 1
    assert stats.rounds_started == 1  # the next round is an hour away: a catch-up scraped it
