"""The built-in `metric-definitions` backend type: application teams' `MetricDefinition`s,
served in their namespaces, with the platform's policy as its settings (docs/metric-definitions.md,
"For the platform team"). Off unless the backends file has an entry of this type.

    backends:
      - name: kubernetes
        type: kubernetes
      - name: metric-definitions
        type: metric-definitions
        settings:
          allowedSources: [Pods, Prometheus, Formula, Schedule, HTTP]
          limits: {definitions: 50, scrapeTargets: 100, seriesPerQuery: 1000, minInterval: 15s}
          namespaces:
            batch: {definitions: 200, scrapeTargets: 500, minInterval: 5s}
          prometheus:
            servers: [{name: main, url: "http://prometheus.monitoring.svc:9090"}]
          http: {timeout: 5s, maxBodyBytes: 1048576}
          formulaPlatformInputs: [rabbitmq_queue_depth, "shop_.*"]

It yields to every other backend (`registry`: `yields`), so the platform's routes and listings
win over a team's definition of the same metric name; its listing is discovered at run time.
A formula may read the platform's External metrics of its namespace that `formulaPlatformInputs`
lists (through the server's engine: `Provision.reads_external`, `plugins.external_reads`).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.formula_source import (
    PlatformInputs,
    make_formula,
)
from custom_metrics_server.backends.definitions.http_source import HttpSettings, make_http
from custom_metrics_server.backends.definitions.pods_source import make_pods
from custom_metrics_server.backends.definitions.policy import Limits, Platform
from custom_metrics_server.backends.definitions.prometheus_source import (
    PrometheusServers,
    make_prometheus,
)
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.source import SourceMaker, SourceTools
from custom_metrics_server.backends.definitions.watched import watch_group
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import load_connection
from custom_metrics_server.kube.lease import shared_elector
from custom_metrics_server.plugins.builtin import BuiltinSettings, Provision, Seconds, resolve_path
from custom_metrics_server.prometheus.rules import ServerConfig
from custom_metrics_server.sdk import BackendContext, factory

__all__ = [
    "MAKERS",
    "DefinitionsSettings",
    "HttpSourceSettings",
    "LimitSettings",
    "PrometheusSourceSettings",
    "metric_definitions",
]

SourceName = Literal["Pods", "Prometheus", "Formula", "Schedule", "HTTP"]

#: The source types this server serves, by `source.type`: a new source is a module of
#: `backends/definitions/` implementing `source.Source`, its maker added here, and its
#: platform settings (if any) added to `DefinitionsSettings` and passed in `SourceTools.settings`.
MAKERS: dict[str, SourceMaker] = {
    "Pods": make_pods,
    "Prometheus": make_prometheus,
    "Formula": make_formula,
    "Schedule": make_schedule,
    "HTTP": make_http,
}


class LimitSettings(BuiltinSettings):
    """Limits of a namespace (see `backends.definitions.policy.Limits`)."""

    definitions: int = Field(50, ge=0)
    scrape_targets: int = Field(100, alias="scrapeTargets", ge=0)
    min_interval: Seconds = Field(15.0, alias="minInterval", ge=5)
    series_per_query: int = Field(1000, alias="seriesPerQuery", ge=1)

    def limits(self) -> Limits:
        """As the policy's value."""
        return Limits(
            self.definitions, self.scrape_targets, self.min_interval, self.series_per_query
        )


class PrometheusServerSettings(BuiltinSettings):
    """One Prometheus-compatible server definitions may name (the fields of the `prometheus`
    backend's `servers:`, docs/prometheus.md)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    url: str = Field(pattern=r"^https?://")
    ca_file: str | None = Field(None, alias="caFile")
    token_file: str | None = Field(None, alias="tokenFile")
    headers: dict[str, str] = Field(default_factory=dict)
    insecure_skip_verify: bool = Field(False, alias="insecureSkipVerify")
    client_cert_file: str | None = Field(None, alias="clientCertFile")
    client_key_file: str | None = Field(None, alias="clientKeyFile")


class PrometheusSourceSettings(BuiltinSettings):
    """The Prometheus servers of `prometheus` sources: a definition names one (`server`), or
    gets `defaultServer` (the first server when unset)."""

    servers: tuple[PrometheusServerSettings, ...] = ()
    default_server: str | None = Field(None, alias="defaultServer")
    query_timeout: Seconds = Field(10.0, alias="queryTimeout", gt=0)

    @model_validator(mode="after")
    def _known_default(self) -> PrometheusSourceSettings:
        names = [server.name for server in self.servers]
        if len(set(names)) != len(names):
            raise ValueError("prometheus.servers: a name is given twice")
        if self.default_server is not None and self.default_server not in names:
            raise ValueError(f"prometheus.defaultServer {self.default_server!r} is not a server")
        return self

    def servers_of(self, base: Path) -> PrometheusServers:
        """As the source's value, paths relative to the backends file."""
        configs = {
            server.name: ServerConfig(
                name=server.name,
                url=server.url,
                ca_file=resolve_path(base, server.ca_file),
                token_file=resolve_path(base, server.token_file),
                headers=tuple(server.headers.items()),
                insecure_skip_verify=server.insecure_skip_verify,
                client_cert_file=resolve_path(base, server.client_cert_file),
                client_key_file=resolve_path(base, server.client_key_file),
            )
            for server in self.servers
        }
        default = self.default_server or next(iter(configs), None)
        return PrometheusServers(configs, default, self.query_timeout)


class HttpSourceSettings(BuiltinSettings):
    """The caps of `http` sources."""

    timeout: Seconds = Field(5.0, gt=0, le=60)
    max_body_bytes: int = Field(1 << 20, alias="maxBodyBytes", ge=1024, le=16 << 20)


class DefinitionsSettings(BuiltinSettings):
    """The platform's policy over definitions, and how the server reaches the cluster."""

    kubeconfig: str | None = None
    #: the source types the platform allows (default: all; those without a maker in `MAKERS`
    #: are refused as not served yet)
    allowed_sources: tuple[SourceName, ...] = Field(
        ("Pods", "Prometheus", "Formula", "Schedule", "HTTP"), alias="allowedSources"
    )
    limits: LimitSettings = Field(default_factory=lambda: LimitSettings.model_validate({}))
    namespaces: dict[str, LimitSettings] = Field(default_factory=dict)
    #: how pods' `/metrics` are reached: at the pod IP, or through the API server's pod proxy
    pod_source: Literal["direct", "proxy"] = Field("direct", alias="podSource")
    scrape_timeout: Seconds = Field(10.0, alias="scrapeTimeout", gt=0)
    max_body_bytes: int = Field(10 << 20, alias="maxBodyBytes", ge=1024)
    prometheus: PrometheusSourceSettings = Field(
        default_factory=lambda: PrometheusSourceSettings.model_validate({})
    )
    http: HttpSourceSettings = Field(default_factory=lambda: HttpSourceSettings.model_validate({}))
    #: the platform's External metrics a formula may read in its namespace, each a regular
    #: expression matched against the whole name (a plain name matches itself); none by
    #: default: such a metric may hold more than the namespace's own data
    formula_platform_inputs: tuple[str, ...] = Field((), alias="formulaPlatformInputs")
    #: write each definition's status and Events (off: the state shows in `?explain=1` only)
    write_status: bool = Field(True, alias="writeStatus")
    #: several replicas: only the holder of this Lease writes status (the Kubernetes
    #: backend's Lease, one election per process: `kube.lease.shared_elector`)
    leader_elect: bool = Field(False, alias="leaderElect")
    leader_elect_resource_namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE", "custom-metrics"),
        alias="leaderElectResourceNamespace",
    )
    leader_elect_resource_name: str = Field(
        "custom-metrics-server", alias="leaderElectResourceName"
    )

    @field_validator("formula_platform_inputs")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"formulaPlatformInputs: {pattern!r}: {err}") from err
        return value


@factory(settings=DefinitionsSettings)
def metric_definitions(settings: DefinitionsSettings, *, context: BackendContext) -> Provision:
    """`MetricDefinition`s of every namespace, watched through the kubeconfig's (or the pod's
    account's) API server."""
    connection = load_connection(resolve_path(context.base_dir, settings.kubeconfig))
    client = KubeClient(connection)
    platform = Platform(
        allowed=frozenset(settings.allowed_sources),
        limits=settings.limits.limits(),
        namespaces={name: limits.limits() for name, limits in settings.namespaces.items()},
        formula_inputs=tuple(re.compile(p) for p in settings.formula_platform_inputs),
    )
    identity = socket.gethostname()
    elector = (
        shared_elector(
            connection,
            namespace=settings.leader_elect_resource_namespace,
            name=settings.leader_elect_resource_name,
            identity=identity,
        )
        if settings.leader_elect and settings.write_status
        else None
    )
    backend = DefinitionsBackend(
        client,
        makers=MAKERS,
        platform=platform,
        name=context.name,
        elector=elector,
        write_status=settings.write_status,
        identity=identity,
    )
    platform_inputs = PlatformInputs(platform.allows_formula_input)
    backend.catalog.tools = SourceTools(
        client=client,
        external_value=backend.external_value,
        defines=lambda namespace, metric: (namespace, metric) in backend.catalog.serving,
        platform_value=platform_inputs.value,
        settings={
            "podSource": settings.pod_source,
            "prometheus": settings.prometheus.servers_of(context.base_dir),
            "http": HttpSettings(settings.http.timeout, settings.http.max_body_bytes),
        },
        namespace_limits=platform.namespace_limits,
        scrape_timeout=settings.scrape_timeout,
        max_body_bytes=settings.max_body_bytes,
        watches=watch_group(client, name=f"{context.name}-watches"),  # the backend closes it
    )
    allowed = ", ".join(sorted(platform.allowed))
    return Provision(
        backend,
        what=f"MetricDefinitions of every namespace (sources: {allowed})",
        reads_external=platform_inputs.connect,
    )
