"""The built-in backend types, made the way plugins are: a factory taking its settings (validated
by its own pydantic model) and a `BackendContext`.

| type | what | provides the cluster view |
|---|---|---|
| `kubernetes` | the KEP-1748 resource model of a live cluster, kubelet or node agent usage | yes |
| `prometheus` | prometheus-adapter rules over PromQL; its listing is discovered at run time | no |
| `demo` (`simulated`) | the embedded simulated cluster and its resource metrics | yes |
| `fixture` (`memory`) | objects and values from a YAML fixture (`serve --demo-file`) | yes |
| `pod-metrics` | pods' own `/metrics`: Pods and workload Object metrics (`builtin_remote`) | no |
| `passthrough` | another metrics server's answers, forwarded (`builtin_remote`) | no |

A built-in factory may return a `Provision` instead of a bare backend: the backend plus what
the server serves beside it when the entry provides the cluster view (the `/metrics/resources`
exposition, the Resource Metrics API, the demo's `/api`) and the banner text. These are server
features, not backend capabilities: plugins never return one.

Settings are camelCase, as the flags they mirror are named (docs/backends.md lists them).

One piece (about 400 lines): the table above is this module, each type's settings model beside
its factory, so that a setting and what it does are read together.
"""

from __future__ import annotations

import functools
import time
from collections.abc import (
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from custom_metrics_server.api.core_api import DemoCoreApi
from custom_metrics_server.backends.kubernetes.backend import KubernetesBackend, KubernetesSettings
from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend
from custom_metrics_server.backends.kubernetes.state_exposition import stream_state_exposition
from custom_metrics_server.backends.memory import load_fixture
from custom_metrics_server.backends.simulated import DemoSettings, SimulatedCluster
from custom_metrics_server.domain import (
    BackendRequest,
    ExternalBackendRequest,
    ExternalSample,
    GroupResource,
    MetricInfo,
    Readiness,
    Sample,
)
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import load_connection
from custom_metrics_server.metrics_api.responses import ResourceMetricsApi, ResourceUsageSource
from custom_metrics_server.plugins.config import parse_seconds
from custom_metrics_server.prometheus.backend import PrometheusBackend, PrometheusSettings
from custom_metrics_server.prometheus.options import IN_CLUSTER_CA, IN_CLUSTER_TOKEN
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ConfigError, ServerConfig
from custom_metrics_server.scraping.kubelet_scraper import DEFAULT_CONCURRENCY
from custom_metrics_server.scraping.node_agents import check_address_template
from custom_metrics_server.sdk import BackendContext, factory
from custom_metrics_server.sdk.backend import ClusterView, MetricsBackend

__all__ = [
    "BuiltinSettings",
    "DemoBackendSettings",
    "ExternalRead",
    "FixtureSettings",
    "KubernetesPluginSettings",
    "PrometheusPluginSettings",
    "Provision",
    "demo",
    "fixture",
    "kubernetes",
    "prometheus",
    "resolve_path",
]


#: (namespace, metric) -> the server's answer for that External metric with no selector
#: (`plugins.external_reads`).
ExternalRead = Callable[[str, str], Awaitable[Sequence[ExternalSample]]]

Seconds = Annotated[float, BeforeValidator(parse_seconds), Field(ge=0, allow_inf_nan=False)]


@dataclass
class Provision:
    """A built-in backend and what the server serves beside it (see the module)."""

    backend: MetricsBackend
    what: str = ""
    cluster: ClusterView | None = None
    #: The `/metrics/resources` body, streamed (chunks of bytes).
    exposition: Callable[[], Iterator[bytes]] | None = None
    #: The Resource Metrics API over this backend's cluster (served per the server's flags).
    metrics_api: ResourceMetricsApi | None = None
    demo_core_api: DemoCoreApi | None = None
    #: `resourceRules` usage (Prometheus), for `--resource-metrics-source=prometheus`.
    resource_usage: ResourceUsageSource | None = None
    #: One instance per worker process is safe (`sdk.Replicable`; plugins.replicas).
    replicable: bool = False
    #: It lists, watches and scrapes a cluster: one instance per worker process repeats all
    #: of that, which only the operator may accept (`--workers-replicate-watches`).
    watches: bool = False
    #: Given the server's reader of External metrics through its engine, once the engine
    #: exists and at every reload (`plugins.external_reads`; never answered by this backend).
    reads_external: Callable[[ExternalRead], None] | None = None


class BuiltinSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def resolve_path(base: Path, value: str | None) -> str | None:
    """A settings path, relative to the backends file's directory."""
    if value is None:
        return None
    return str(base / value) if not Path(value).is_absolute() else value


# -- kubernetes -------------------------------------------------------------------------------


def _address_template(value: str | None) -> str | None:
    return None if value is None else check_address_template(value)


class KubernetesPluginSettings(BuiltinSettings):
    """The Kubernetes backend (the flags of `serve` without --demo, camelCased)."""

    kubeconfig: str | None = None
    kubelet_source: Literal["proxy", "direct"] = Field("proxy", alias="kubeletSource")
    kubelet_port: int = Field(10250, alias="kubeletPort", ge=1, le=65535)
    kubelet_certificate_authority: str | None = Field(None, alias="kubeletCertificateAuthority")
    kubelet_insecure_tls: bool = Field(False, alias="kubeletInsecureTls")
    usage_source: Literal["kubelet", "node-agent"] = Field("kubelet", alias="usageSource")
    node_agent_namespace: str = Field("custom-metrics", alias="nodeAgentNamespace")
    node_agent_selector: str = Field(
        "app.kubernetes.io/name=custom-metrics-node-agent", alias="nodeAgentSelector"
    )
    node_agent_port: int = Field(10443, alias="nodeAgentPort", ge=1, le=65535)
    node_agent_address: Annotated[str | None, AfterValidator(_address_template)] = Field(
        None, alias="nodeAgentAddress"
    )
    node_agent_certificate_authority: str | None = Field(
        None, alias="nodeAgentCertificateAuthority"
    )
    node_agent_insecure_tls: bool = Field(False, alias="nodeAgentInsecureTls")
    metric_resolution: Seconds = Field(15.0, alias="metricResolution")
    kubelet_request_timeout: Seconds = Field(10.0, alias="kubeletRequestTimeout")
    kubelet_scrape_concurrency: int = Field(
        DEFAULT_CONCURRENCY, alias="kubeletScrapeConcurrency", ge=1
    )
    discovery_interval: Seconds = Field(600.0, alias="discoveryInterval")
    leader_elect: bool = Field(False, alias="leaderElect")
    leader_elect_resource_namespace: str = Field(
        "custom-metrics", alias="leaderElectResourceNamespace"
    )
    leader_elect_resource_name: str = Field(
        "custom-metrics-server", alias="leaderElectResourceName"
    )


@factory(settings=KubernetesPluginSettings)
def kubernetes(settings: KubernetesPluginSettings, *, context: BackendContext) -> Provision:
    """The resource model of the cluster the kubeconfig (or the pod's account) reaches."""
    connection = load_connection(resolve_path(context.base_dir, settings.kubeconfig))
    backend = KubernetesBackend(
        KubeClient(connection),
        KubernetesSettings(
            kubelet_source=settings.kubelet_source,
            kubelet_port=settings.kubelet_port,
            kubelet_ca_file=resolve_path(context.base_dir, settings.kubelet_certificate_authority),
            kubelet_insecure_tls=settings.kubelet_insecure_tls,
            scrape_interval=settings.metric_resolution,
            scrape_timeout=settings.kubelet_request_timeout,
            scrape_concurrency=settings.kubelet_scrape_concurrency,
            discovery_interval=settings.discovery_interval,
            leader_elect=settings.leader_elect,
            lease_namespace=settings.leader_elect_resource_namespace,
            lease_name=settings.leader_elect_resource_name,
            usage_source=settings.usage_source,
            node_agent_namespace=settings.node_agent_namespace,
            node_agent_selector=settings.node_agent_selector,
            node_agent_port=settings.node_agent_port,
            node_agent_address=settings.node_agent_address,
            node_agent_ca_file=resolve_path(
                context.base_dir, settings.node_agent_certificate_authority
            ),
            node_agent_insecure_tls=settings.node_agent_insecure_tls,
        ),
        name=context.name,
    )
    return Provision(
        backend,
        what=f"the cluster at {connection.host}",
        cluster=backend.state,
        exposition=backend.resource_exposition_chunks,
        metrics_api=ResourceMetricsApi(backend.state, backend.usage_store),
        watches=True,
    )


# -- demo -------------------------------------------------------------------------------------


class DemoBackendSettings(BuiltinSettings):
    """The simulated cluster (the `--demo-*` flags)."""

    seed: int = 42
    pods: int = Field(60, ge=0)
    web_pods: int | None = Field(None, alias="webPods", ge=0)
    interval: Seconds = Field(15.0, gt=0)


class _Composite:
    """Two backends with disjoint listings as one (the demo's application and resource
    metrics): a metric goes to the second when it lists it, else to the first. The router
    asks `member_for` once per decision and calls that member directly
    (`query.decision.answering_backend`); `fetch` makes the same choice for callers outside
    the router (the conformance kit), O(1) a call."""

    def __init__(self, name: str, first: MetricsBackend, second: MetricsBackend) -> None:
        self.name = name
        self.first, self.second = first, second

    def list_metrics(self) -> Collection[MetricInfo]:
        first, second = self.first.list_metrics(), self.second.list_metrics()
        cached = getattr(self, "_union", None)
        if cached is None or cached[0] is not first or cached[1] is not second:
            cached = self._union = (first, second, frozenset(first) | frozenset(second))
        return cached[2]

    def list_external_metrics(self) -> Collection[str]:
        return self.first.list_external_metrics()

    def member_for(self, resource: GroupResource | None, metric: str) -> MetricsBackend:
        """The member answering `metric` of `resource` (None: an external metric, the
        first's). O(listing) once per routing decision."""
        if resource is not None and any(
            info.group_resource == resource and info.metric == metric
            for info in self.second.list_metrics()
        ):
            return self.second
        return self.first

    # Plain functions handing back the member's coroutine: no extra frame on the request path.
    def fetch(self, request: BackendRequest) -> Coroutine[Any, Any, Sequence[Sample]]:
        if request.metric in self.second.list_metrics():
            return self.second.fetch(request)
        return self.first.fetch(request)

    def fetch_external(
        self, request: ExternalBackendRequest
    ) -> Coroutine[Any, Any, Sequence[ExternalSample]]:
        return self.first.fetch_external(request)

    def ready(self) -> Readiness:
        first = self.first.ready()
        return first if not first.ready else self.second.ready()

    async def __aenter__(self) -> Self:
        await self.first.__aenter__()
        try:
            await self.second.__aenter__()
        except BaseException:
            await self.first.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.second.__aexit__(exc_type, exc, tb)
        finally:
            await self.first.__aexit__(exc_type, exc, tb)


@factory(settings=DemoBackendSettings)
def demo(settings: DemoBackendSettings, *, context: BackendContext) -> Provision:
    """The embedded simulated cluster, with the KEP-1748 resource metrics of its pods."""
    simulated = SimulatedCluster(
        DemoSettings(
            seed=settings.seed,
            pods=settings.pods,
            web_pods=settings.web_pods,
            interval=settings.interval,
        )
    )
    simulated.name = context.name
    resources = ResourceMetricsBackend(simulated.cluster, simulated.usage, name=context.name)
    return Provision(
        _Composite(context.name, simulated, resources),
        what=f"the simulated cluster ({settings.pods} pods)",
        cluster=simulated.cluster,
        exposition=functools.partial(stream_state_exposition, simulated.cluster),
        metrics_api=ResourceMetricsApi(simulated.cluster, simulated.usage),
        demo_core_api=DemoCoreApi({str(gr): objs for gr, objs in simulated.world.objects.items()}),
        replicable=True,  # values are a pure function of seed and time: every copy agrees
    )


# -- fixture ----------------------------------------------------------------------------------


class FixtureSettings(BuiltinSettings):
    """Objects and values from a fixture (docs/demo.md): a `file`, or the document inline."""

    file: str | None = None
    objects: list[dict[str, Any]] | None = None
    metrics: list[dict[str, Any]] | None = None
    values: list[dict[str, Any]] | None = None
    external: list[dict[str, Any]] | None = None
    timestamp: str | None = None


@factory(settings=FixtureSettings)
def fixture(settings: FixtureSettings, *, context: BackendContext) -> Provision:
    """A `MemoryBackend` serving the fixture, and its objects as a cluster view."""
    inline = settings.model_dump(exclude={"file"}, exclude_none=True)
    if settings.file is not None:
        if inline:
            raise ValueError(f"give a file or the fixture inline, not both ({sorted(inline)})")
        path = Path(resolve_path(context.base_dir, settings.file) or "")
        document = yaml.safe_load(path.read_text()) or {}
        what = f"the fixture {settings.file}"
    else:
        document, what = inline, f"the fixture of backend {context.name}"
    if not isinstance(document, Mapping):
        raise ValueError(f"the fixture is a {type(document).__name__}, not a mapping")
    cluster, backend = load_fixture(document, now=time.time())
    backend.name = context.name
    return Provision(backend, what=what, cluster=cluster, replicable=True)  # static values


# -- prometheus -------------------------------------------------------------------------------


class PrometheusPluginSettings(BuiltinSettings):
    """The Prometheus backend (prometheus-adapter's flags, camelCased; docs/prometheus.md)."""

    url: str | None = Field(None, pattern=r"^https?://")
    config: str | None = None
    rules: dict[str, Any] | None = None  # the rules document inline, instead of `config`
    metrics_relist_interval: Seconds = Field(60.0, alias="metricsRelistInterval", gt=0)
    metrics_max_age: Seconds | None = Field(None, alias="metricsMaxAge")
    ca_file: str | None = Field(None, alias="caFile")
    token_file: str | None = Field(None, alias="tokenFile")
    headers: dict[str, str] = Field(default_factory=dict)
    verb: Literal["GET", "POST"] = "GET"
    client_cert_file: str | None = Field(None, alias="clientCertFile")
    client_key_file: str | None = Field(None, alias="clientKeyFile")
    auth_in_cluster: bool = Field(False, alias="authInCluster")
    query_timeout: Seconds = Field(10.0, alias="queryTimeout", gt=0)
    config_reload_interval: Seconds = Field(5.0, alias="configReloadInterval")
    #: > 0: refresh `resourceRules` usage (metrics.k8s.io) this often.
    resource_usage_interval: Seconds = Field(0.0, alias="resourceUsageInterval")


@factory(settings=PrometheusPluginSettings)
def prometheus(settings: PrometheusPluginSettings, *, context: BackendContext) -> Provision:
    """PromQL over a prometheus-adapter rules file; its configuration is loaded (and checked)
    here, so a broken rules file fails the start-up naming the backend."""
    base = context.base_dir
    if settings.url is None and settings.config is None and settings.rules is None:
        raise ConfigError("give url, or a config (rules file) naming its servers")
    if settings.config is not None and settings.rules is not None:
        raise ConfigError("give config (a rules file) or rules (inline), not both")
    token_file = resolve_path(base, settings.token_file)
    ca_file = resolve_path(base, settings.ca_file)
    if settings.auth_in_cluster:
        token_file = token_file or IN_CLUSTER_TOKEN
        ca_file = ca_file or IN_CLUSTER_CA
    default = None
    if settings.url is not None:
        default = ServerConfig(
            name=DEFAULT_SERVER,
            url=settings.url,
            ca_file=ca_file,
            token_file=token_file,
            headers=tuple(settings.headers.items()),
            client_cert_file=resolve_path(base, settings.client_cert_file),
            client_key_file=resolve_path(base, settings.client_key_file),
        )
    config_path = resolve_path(base, settings.config)
    backend = PrometheusBackend(
        context.cluster,
        PrometheusSettings(
            config_path=Path(config_path) if config_path is not None else None,
            config_text=yaml.safe_dump(settings.rules) if settings.rules is not None else None,
            default_server=default,
            relist_interval=settings.metrics_relist_interval,
            max_age=settings.metrics_max_age,
            query_timeout=settings.query_timeout,
            verb=settings.verb,
            reload_interval=settings.config_reload_interval,
            resource_usage_interval=settings.resource_usage_interval,
        ),
        name=context.name,
    )
    backend.load_config()
    usage = None
    if settings.resource_usage_interval > 0:
        if backend.config.resource_rules is None:
            raise ConfigError(
                "--resource-metrics-source=prometheus needs resourceRules in the configuration "
                "(resourceUsageInterval is set)"
            )
        usage = backend.resource_usage
    # Stateless per query; each copy repeats the series relist (and resourceRules refresh).
    return Provision(backend, what="Prometheus metrics", resource_usage=usage, replicable=True)
