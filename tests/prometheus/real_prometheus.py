"""A real Prometheus server for tests (Debian package `prometheus`), holding known data.

The data is written as OpenMetrics text with explicit timestamps and backfilled with
`promtool tsdb create-blocks-from openmetrics`, so every value a test expects is known exactly:
gauges are constant, counters grow on a straight line (so any `rate()` is that slope). Samples
run from 30 minutes before the start to two hours after it, every 15 s, so instant queries at
"now" keep finding them for the whole test session.

`stop()` / `start()` keep the port, for outage tests.
"""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

STEP = 15
BEFORE = 30 * 60
AFTER = 2 * 3600


@dataclass(frozen=True)
class Gauge:
    """A constant series."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class CounterLine:
    """A counter growing by `per_second` from 0 at the first sample."""

    name: str
    labels: Mapping[str, str]
    per_second: float


def _labels(labels: Mapping[str, str]) -> str:
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in sorted(labels.items())
    )
    return "{" + inner + "}"


def openmetrics(series: Iterable[Gauge | CounterLine], *, start: int, end: int) -> str:
    """The OpenMetrics document for promtool: one family per name, samples every STEP s."""
    families: dict[str, list[Gauge | CounterLine]] = {}
    for item in series:
        families.setdefault(item.name, []).append(item)
    lines: list[str] = []
    for name, items in families.items():
        # OpenMetrics counters must end in _total; other growing series are typed gauge.
        counter = isinstance(items[0], CounterLine) and name.endswith("_total")
        family = name.removesuffix("_total") if counter else name
        lines.append(f"# TYPE {family} {'counter' if counter else 'gauge'}")
        for item in items:
            labels = _labels(item.labels)
            for t in range(start, end + 1, STEP):
                if isinstance(item, CounterLine):
                    value = item.per_second * (t - start)
                else:
                    value = item.value
                lines.append(f"{name}{labels} {_number(value)} {t}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RealPrometheus:
    """One Prometheus process over a backfilled TSDB in `workdir`."""

    workdir: Path
    series: list[Gauge | CounterLine]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    started_at: int = 0
    before: int = BEFORE
    after: int = AFTER

    @staticmethod
    def available() -> str | None:
        """Why Prometheus cannot run here, or None."""
        for tool in ("prometheus", "promtool"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed (Debian package `prometheus`; .ci/run installs it)"
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backfill(self) -> None:
        self.started_at = int(time.time())
        data = self.workdir / "data.om"
        data.write_text(
            openmetrics(
                self.series, start=self.started_at - self.before, end=self.started_at + self.after
            )
        )
        tsdb = self.workdir / "tsdb"
        shutil.rmtree(tsdb, ignore_errors=True)
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(data), str(tsdb)],
            check=True,
            capture_output=True,
        )
        (self.workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")

    def start(self) -> None:
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=30d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "prometheus.log").read_text()[-2000:]
                raise RuntimeError(f"prometheus did not start:\n{tail}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def query(self, expression: str) -> list[dict[str, object]]:
        """Ask Prometheus directly (to compare with what the server answers)."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=10)
        response.raise_for_status()
        result: list[dict[str, object]] = response.json()["data"]["result"]
        return result
