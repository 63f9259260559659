"""The built-in backend types that read other servers: pods' own `/metrics` (`pod-metrics`) and
another metrics server (`passthrough`), made the way plugins are (see `builtin` for the others
and for `Provision`). Neither provides the cluster view; both are `dynamic` (their listing is
discovered at run time) in `registry`.
"""

from __future__ import annotations

import ssl
from typing import Literal

from pydantic import Field, model_validator

from custom_metrics_server.backends.passthrough import (
    PassthroughBackend,
    PassthroughSettings,
    UpstreamConfig,
)
from custom_metrics_server.backends.pod_metrics.backend import PodMetricsBackend
from custom_metrics_server.backends.pod_metrics.settings import PodMetricsSettings
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import load_connection
from custom_metrics_server.plugins.builtin import BuiltinSettings, Provision, Seconds, resolve_path
from custom_metrics_server.sdk import BackendContext, factory

__all__ = ["PassthroughPluginSettings", "passthrough", "pod_metrics"]


# -- pod-metrics ------------------------------------------------------------------------------


@factory(settings=PodMetricsSettings)
def pod_metrics(settings: PodMetricsSettings, *, context: BackendContext) -> Provision:
    """Pods' own Prometheus `/metrics` (docs/backends.md, "Pods' own metrics"): the pods are
    found with a watch of the cluster the kubeconfig (or the pod's account) reaches."""
    connection = load_connection(resolve_path(context.base_dir, settings.kubeconfig))
    config = settings.to_config(context.base_dir)
    backend = PodMetricsBackend(config, KubeClient(connection), name=context.name)
    chosen = [scrape.name for scrape in config.scrape]
    if config.annotations is not None:
        chosen.append(f"annotations {config.annotations.prefix}/scrape")
    return Provision(
        backend,
        what=f"pods' own metrics ({', '.join(chosen)}; {config.source} every {config.interval:g}s)",
        watches=True,
    )


# -- passthrough ------------------------------------------------------------------------------


class PassthroughPluginSettings(BuiltinSettings):
    """Another metrics server to forward to (docs/backends.md, "Pass-through")."""

    url: str = Field(pattern=r"^https://[^/?#\s]+(/[^?#\s]*)?$")
    ca_file: str | None = Field(None, alias="caFile")
    client_cert_file: str | None = Field(None, alias="clientCertFile")
    client_key_file: str | None = Field(None, alias="clientKeyFile")
    token_file: str | None = Field(None, alias="tokenFile")
    tls_server_name: str | None = Field(None, alias="tlsServerName", min_length=1)
    insecure_skip_tls_verify: bool = Field(False, alias="insecureSkipTlsVerify")
    #: Deadline of one upstream call; default 80 % of the backend's deadline, and below it.
    request_timeout: Seconds | None = Field(None, alias="requestTimeout", gt=0)
    connect_timeout: Seconds = Field(2.0, alias="connectTimeout", gt=0)
    custom_version: Literal["v1beta2", "v1beta1", "none"] | None = Field(
        None, alias="customVersion"
    )
    external_version: Literal["v1beta1", "none"] | None = Field(None, alias="externalVersion")
    discovery_interval: Seconds = Field(60.0, alias="discoveryInterval", gt=0)
    fan_out_concurrency: int = Field(8, alias="fanOutConcurrency", ge=1, le=256)
    max_connections: int = Field(16, alias="maxConnections", ge=1, le=1024)

    @model_validator(mode="after")
    def _pairs(self) -> PassthroughPluginSettings:
        if self.client_key_file and not self.client_cert_file:
            raise ValueError("clientKeyFile needs clientCertFile")
        if self.insecure_skip_tls_verify and self.ca_file:
            raise ValueError("caFile and insecureSkipTlsVerify exclude each other")
        return self


@factory(settings=PassthroughPluginSettings)
def passthrough(settings: PassthroughPluginSettings, *, context: BackendContext) -> Provision:
    """Forwards the metrics its routes claim to the upstream at `url`; its files (CA bundle,
    client certificate and key, token) are read now (a missing one fails the start naming it)
    and again whenever they change."""
    deadline = context.timeout
    request_timeout = settings.request_timeout
    if request_timeout is None:
        request_timeout = round(deadline * 0.8, 3)
    elif request_timeout >= deadline:
        raise ValueError(
            f"requestTimeout ({request_timeout:g}s) must be below the backend's deadline "
            f"({deadline:g}s, its `timeout`), so that a slow upstream is a 504 naming it"
        )
    base = context.base_dir
    upstream = UpstreamConfig(
        url=settings.url,
        ca_file=resolve_path(base, settings.ca_file),
        client_cert_file=resolve_path(base, settings.client_cert_file),
        client_key_file=resolve_path(base, settings.client_key_file),
        token_file=resolve_path(base, settings.token_file),
        tls_server_name=settings.tls_server_name,
        insecure_skip_tls_verify=settings.insecure_skip_tls_verify,
        request_timeout=request_timeout,
        connect_timeout=min(settings.connect_timeout, request_timeout),
        max_connections=settings.max_connections,
    )
    if settings.insecure_skip_tls_verify:
        context.logger.warning(
            "backend %s: insecureSkipTlsVerify: the upstream %s is not authenticated",
            context.name,
            settings.url,
        )
    try:
        backend = PassthroughBackend(
            PassthroughSettings(
                upstream=upstream,
                custom_version=settings.custom_version,
                external_version=settings.external_version,
                discovery_interval=settings.discovery_interval,
                fan_out_concurrency=settings.fan_out_concurrency,
            ),
            name=context.name,
            cluster=context.cluster,
            logger=context.logger,
        )
    except (OSError, ssl.SSLError) as err:
        files = ", ".join(
            f"{field} {path}"
            for field, path in (
                ("caFile", upstream.ca_file),
                ("clientCertFile", upstream.client_cert_file),
                ("clientKeyFile", upstream.client_key_file),
                ("tokenFile", upstream.token_file),
            )
            if path
        )
        raise ValueError(f"cannot load {files}: {err}") from err
    # A stateless proxy: each copy repeats only the upstream's discovery polls.
    return Provision(backend, what=f"the metrics server at {settings.url}", replicable=True)
