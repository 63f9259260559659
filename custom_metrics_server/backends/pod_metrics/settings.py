"""The `pod-metrics` backend's settings in the backends file, validated by pydantic (every
problem at once, each naming its field: `settings.scrape[0].selector: ...`), and turned into
the plain `config.PodMetricsConfig` the backend runs on.

    settings:
      metrics: [http_requests_total, {name: queue_depth, labels: "queue in (emails,reports)"}]
      scrape:
        - name: web
          namespaces: [shop]
          selector: app.kubernetes.io/name=web
          port: metrics          # a container port's name, or a number
          path: /metrics
      annotations: {enabled: true}

docs/backends.md ("Pods' own metrics") describes every field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from custom_metrics_server.backends.pod_metrics.config import (
    AnnotationDiscovery,
    MetricRule,
    PodMetricsConfig,
    ScrapeConfig,
)
from custom_metrics_server.machinery.durations import go_duration_seconds
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.machinery.validation import SelectorError

__all__ = ["PodMetricsSettings"]

_METRIC: Final = re.compile(r"[a-zA-Z_:*?][a-zA-Z0-9_:*?]*")
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PORT_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_PREFIX: Final = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
#: Defaults, also named by the docs.
DEFAULT_INTERVAL: Final = 15.0
DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_CONCURRENCY: Final = 32
DEFAULT_MAX_BODY: Final = 10 << 20
DEFAULT_MAX_SERIES: Final = 1_000
STALE_INTERVALS: Final = 3


def _seconds(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    seconds = go_duration_seconds(value) if isinstance(value, str) else None
    if seconds is None:
        raise ValueError(f"invalid duration {value!r} (examples: 15s, 500ms, 1m)")
    return seconds


Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0, allow_inf_nan=False)]


def _selector(text: str) -> Selector:
    try:
        return parse_selector(text)
    except SelectorError as err:
        raise ValueError(f"invalid label selector {text!r}: {err}") from None


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class MetricSettings(_Settings):
    """One entry of `metrics`: a name (exact, or a glob with `*` and `?`) and a label selector
    the kept series must match."""

    name: str
    labels: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _METRIC.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a metric name (letters, digits, _ and :, with * and ? as "
                "wildcards)"
            )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: str) -> str:
        _selector(value)
        return value

    def rule(self) -> MetricRule:
        """As the backend keeps it."""
        return MetricRule(self.name, _selector(self.labels))


def _metric_entry(value: object) -> object:
    """A bare string is `{name: <it>}`."""
    return {"name": value} if isinstance(value, str) else value


MetricEntry = Annotated[MetricSettings, BeforeValidator(_metric_entry)]


def _namespaces(values: list[str]) -> list[str]:
    for value in values:
        if not _DNS_LABEL.fullmatch(value) or len(value) > 63:
            raise ValueError(f"{value!r} is not a namespace name")
    return values


class ScrapeSettings(_Settings):
    """Pods chosen by namespace and label selector, and the endpoint scraped on each."""

    name: str
    port: int | str
    path: str = "/metrics"
    scheme: Literal["http", "https"] = "http"
    namespaces: list[str] = Field(default_factory=list)
    selector: str = ""
    metrics: list[MetricEntry] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _DNS_LABEL.fullmatch(value) or len(value) > 63:
            raise ValueError(f"{value!r} is not a lower-case DNS label")
        return value

    @field_validator("port")
    @classmethod
    def _port(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if not 0 < value < 65536:
                raise ValueError(f"port {value} is not between 1 and 65535")
            return value
        if value.isdigit():
            return cls._port(int(value))
        if not _PORT_NAME.fullmatch(value) or len(value) > 15:
            raise ValueError(f"{value!r} is neither a port number nor a container port name")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or any(c in value for c in " \r\n\t"):
            raise ValueError(f"{value!r} is not an absolute path")
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        return _namespaces(value)

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: str) -> str:
        _selector(value)
        return value


class AnnotationSettings(_Settings):
    """Pods that opt in with annotations (only when `enabled`)."""

    enabled: bool = False
    prefix: str = "custom-metrics-server.io"
    namespaces: list[str] = Field(default_factory=list)
    metrics: list[MetricEntry] | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _PREFIX.fullmatch(value) or len(value) > 253:
            raise ValueError(f"{value!r} is not an annotation prefix (a DNS subdomain)")
        return value

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, value: list[str]) -> list[str]:
        return _namespaces(value)


class TlsSettings(_Settings):
    """How an `https` endpoint is verified when scraped directly."""

    ca_file: str | None = Field(None, alias="caFile")
    insecure_skip_verify: bool = Field(False, alias="insecureSkipVerify")


Workload = Literal["deployments", "statefulsets", "replicasets", "daemonsets", "jobs"]


def _all_workloads() -> list[Workload]:
    return ["deployments", "statefulsets", "replicasets", "daemonsets", "jobs"]


def _no_tls() -> TlsSettings:
    return TlsSettings.model_validate({})


class PodMetricsSettings(_Settings):
    """The `pod-metrics` backend (docs/backends.md, "Pods' own metrics")."""

    kubeconfig: str | None = None
    source: Literal["direct", "proxy"] = "direct"
    interval: Seconds = DEFAULT_INTERVAL
    timeout: Seconds = DEFAULT_TIMEOUT
    concurrency: int = Field(DEFAULT_CONCURRENCY, ge=1, le=4096)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY, alias="maxBodyBytes", ge=1024)
    max_series_per_target: int = Field(DEFAULT_MAX_SERIES, alias="maxSeriesPerTarget", ge=1)
    stale_after: Seconds | None = Field(None, alias="staleAfter")
    metrics: list[MetricEntry] = Field(default_factory=list)
    scrape: list[ScrapeSettings] = Field(default_factory=list)
    annotations: AnnotationSettings = Field(default_factory=AnnotationSettings)
    workloads: list[Workload] = Field(default_factory=_all_workloads)
    workload_value: Literal["sum", "average"] = Field("sum", alias="workloadValue")
    tls: TlsSettings = Field(default_factory=_no_tls)

    @model_validator(mode="after")
    def _coherent(self) -> PodMetricsSettings:
        problems = []
        if not self.scrape and not self.annotations.enabled:
            problems.append("nothing to scrape: give scrape configs or enable annotations")
        names = [scrape.name for scrape in self.scrape]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            problems.append(f"scrape config names must be unique: {', '.join(repeated)}")
        if not self.metrics:
            unselected = [
                f"scrape[{index}] ({scrape.name})"
                for index, scrape in enumerate(self.scrape)
                if not scrape.metrics
            ]
            if self.annotations.enabled and not self.annotations.metrics:
                unselected.append("annotations")
            if unselected:
                problems.append(
                    "no metrics are selected for "
                    + ", ".join(unselected)
                    + ": list the metrics to keep in metrics (or in each scrape config)"
                )
        if self.stale_after is not None and self.stale_after < self.interval:
            problems.append(
                f"staleAfter ({self.stale_after:g}s) must be at least the interval "
                f"({self.interval:g}s)"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def to_config(self, base_dir: Path | None = None) -> PodMetricsConfig:
        """The plain configuration (relative paths resolved against `base_dir`)."""

        def rules(entries: list[MetricSettings] | None) -> tuple[MetricRule, ...]:
            return tuple(entry.rule() for entry in entries or ())

        ca_file = self.tls.ca_file
        if ca_file is not None and base_dir is not None and not Path(ca_file).is_absolute():
            ca_file = str(base_dir / ca_file)
        return PodMetricsConfig(
            metrics=rules(self.metrics),
            scrape=tuple(
                ScrapeConfig(
                    name=scrape.name,
                    port=scrape.port,
                    path=scrape.path,
                    scheme=scrape.scheme,
                    namespaces=frozenset(scrape.namespaces),
                    selector=_selector(scrape.selector),
                    metrics=rules(scrape.metrics),
                )
                for scrape in self.scrape
            ),
            annotations=(
                AnnotationDiscovery(
                    prefix=self.annotations.prefix,
                    namespaces=frozenset(self.annotations.namespaces),
                    metrics=rules(self.annotations.metrics),
                )
                if self.annotations.enabled
                else None
            ),
            source=self.source,
            interval=self.interval,
            timeout=self.timeout,
            concurrency=self.concurrency,
            max_body_bytes=self.max_body_bytes,
            max_series_per_target=self.max_series_per_target,
            stale_after=(
                self.stale_after
                if self.stale_after is not None
                else STALE_INTERVALS * self.interval
            ),
            workloads=tuple(dict.fromkeys(self.workloads)),
            workload_value=self.workload_value,
            tls_ca_file=ca_file,
            tls_insecure_skip_verify=self.tls.insecure_skip_verify,
        )
