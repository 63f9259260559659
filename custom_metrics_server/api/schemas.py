"""pydantic models of every wire object, for the OpenAPI documents and for tests.

These models are the typed description of what `wire.py` writes; they are NOT used to build
responses (per-item validation would cost several times the hot path: docs/performance.md,
"Bare ASGI against FastAPI routes"). The OpenAPI v2/v3 documents are
generated from them (`openapi.py`), and the tests validate real responses against them, so the
documents and the bytes cannot drift apart silently. Each model carries its Kubernetes
definition name (`io.k8s...`) in `DEFINITIONS`.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

QUANTITY_REF: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
TIME_REF: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"

#: Marker key that `openapi.py` replaces by a `$ref` to the named string definition
#: (pydantic resolves real `$ref`s itself and would not find these).
REF_MARKER: Final = "x-definition"

Quantity = Annotated[str, WithJsonSchema({"type": "string", REF_MARKER: QUANTITY_REF})]
Time = Annotated[str | None, WithJsonSchema({"type": "string", REF_MARKER: TIME_REF})]

#: Definitions that are plain strings with a format, as in the Kubernetes specs.
STRING_DEFINITIONS: Final = {
    QUANTITY_REF: {
        "type": "string",
        "description": (
            "Quantity is a fixed-point representation of a number, in canonical form: "
            "<signedNumber><suffix> with suffixes Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or e<n>."
        ),
    },
    TIME_REF: {
        "type": "string",
        "format": "date-time",
        "description": "RFC 3339 time in UTC with second precision.",
    },
}


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)


class ObjectReference(_Wire):
    """The object a metric describes (core/v1 ObjectReference)."""

    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    field_path: str | None = Field(default=None, alias="fieldPath")


class LabelSelectorRequirement(_Wire):
    """One set-based requirement of a label selector."""

    key: str
    operator: str
    values: list[str] | None = None


class LabelSelector(_Wire):
    """A label query over a set of resources."""

    match_labels: dict[str, str] | None = Field(default=None, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, alias="matchExpressions"
    )


class ListMeta(_Wire):
    """List metadata (always empty here)."""

    resource_version: str | None = Field(default=None, alias="resourceVersion")
    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int | None = Field(default=None, alias="remainingItemCount")


class MetricValueV1beta1(_Wire):
    """custom.metrics.k8s.io/v1beta1 MetricValue."""

    described_object: ObjectReference = Field(alias="describedObject")
    metric_name: str = Field(alias="metricName")
    timestamp: Time
    window: int | None = Field(default=None, alias="window")
    value: Quantity
    selector: LabelSelector | None = None


class MetricValueListV1beta1(_Wire):
    """custom.metrics.k8s.io/v1beta1 MetricValueList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[MetricValueV1beta1]


class MetricIdentifier(_Wire):
    """custom.metrics.k8s.io/v1beta2 MetricIdentifier."""

    name: str
    selector: LabelSelector | None = None


class MetricValueV1beta2(_Wire):
    """custom.metrics.k8s.io/v1beta2 MetricValue."""

    described_object: ObjectReference = Field(alias="describedObject")
    metric: MetricIdentifier
    timestamp: Time
    window_seconds: int | None = Field(default=None, alias="windowSeconds")
    value: Quantity


class MetricValueListV1beta2(_Wire):
    """custom.metrics.k8s.io/v1beta2 MetricValueList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[MetricValueV1beta2]


class ExternalMetricValue(_Wire):
    """external.metrics.k8s.io/v1beta1 ExternalMetricValue."""

    metric_name: str = Field(alias="metricName")
    metric_labels: dict[str, str] | None = Field(alias="metricLabels")
    timestamp: Time
    window: int | None = None
    value: Quantity


class ExternalMetricValueList(_Wire):
    """external.metrics.k8s.io/v1beta1 ExternalMetricValueList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[ExternalMetricValue]


class APIResource(_Wire):
    """One discovery entry."""

    name: str
    singular_name: str = Field(alias="singularName")
    namespaced: bool
    kind: str
    verbs: list[str]


class APIResourceList(_Wire):
    """The resources (metrics) of one group version."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    group_version: str = Field(alias="groupVersion")
    resources: list[APIResource]


class GroupVersionForDiscovery(_Wire):
    """A version of a group."""

    group_version: str = Field(alias="groupVersion")
    version: str


class ServerAddressByClientCIDR(_Wire):
    """Where clients in a CIDR reach the server."""

    client_cidr: str = Field(alias="clientCIDR")
    server_address: str = Field(alias="serverAddress")


class APIGroup(_Wire):
    """A served API group."""

    kind: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    name: str
    versions: list[GroupVersionForDiscovery]
    preferred_version: GroupVersionForDiscovery | None = Field(
        default=None, alias="preferredVersion"
    )
    server_address_by_client_cidrs: list[ServerAddressByClientCIDR] | None = Field(
        default=None, alias="serverAddressByClientCIDRs"
    )


class APIGroupList(_Wire):
    """Every served API group."""

    kind: str
    api_version: str | None = Field(default=None, alias="apiVersion")
    groups: list[APIGroup]


class StatusCause(_Wire):
    """One cause of a failure."""

    reason: str | None = None
    message: str | None = None
    field: str | None = None


class StatusDetails(_Wire):
    """What a failure was about."""

    name: str | None = None
    group: str | None = None
    kind: str | None = None
    uid: str | None = None
    causes: list[StatusCause] | None = None
    retry_after_seconds: int | None = Field(default=None, alias="retryAfterSeconds")


class Status(_Wire):
    """The body of every error response."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    status: str
    message: str
    reason: str | None = None
    details: StatusDetails | None = None
    code: int


Duration = Annotated[
    str,
    WithJsonSchema(
        {"type": "string", "description": "A Go duration (time.Duration.String), e.g. 15s."}
    ),
]


class ObjectMeta(_Wire):
    """The metadata a PodMetrics/NodeMetrics carries (a subset of metav1.ObjectMeta)."""

    name: str | None = None
    namespace: str | None = None
    creation_timestamp: Time = Field(default=None, alias="creationTimestamp")
    labels: dict[str, str] | None = None


class ContainerMetrics(_Wire):
    """metrics.k8s.io/v1beta1 ContainerMetrics: one container's usage."""

    name: str
    usage: dict[str, Quantity]


class PodMetrics(_Wire):
    """metrics.k8s.io/v1beta1 PodMetrics (kind and apiVersion only on a single object)."""

    kind: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    metadata: ObjectMeta
    timestamp: Time
    window: Duration
    containers: list[ContainerMetrics]


class PodMetricsList(_Wire):
    """metrics.k8s.io/v1beta1 PodMetricsList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[PodMetrics]


class NodeMetrics(_Wire):
    """metrics.k8s.io/v1beta1 NodeMetrics (kind and apiVersion only on a single object)."""

    kind: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    metadata: ObjectMeta
    timestamp: Time
    window: Duration
    usage: dict[str, Quantity]


class NodeMetricsList(_Wire):
    """metrics.k8s.io/v1beta1 NodeMetricsList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[NodeMetrics]


class ContainerMetricsV1(_Wire):
    """metrics.k8s.io/v1 ContainerMetrics: one container's usage."""

    name: str
    usage: dict[str, Quantity]


class PodMetricsV1(_Wire):
    """metrics.k8s.io/v1 PodMetrics (kind and apiVersion only on a single object)."""

    kind: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    metadata: ObjectMeta
    timestamp: Time
    window: Duration
    containers: list[ContainerMetricsV1]


class PodMetricsListV1(_Wire):
    """metrics.k8s.io/v1 PodMetricsList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[PodMetricsV1]


class NodeMetricsV1(_Wire):
    """metrics.k8s.io/v1 NodeMetrics (kind and apiVersion only on a single object)."""

    kind: str | None = None
    api_version: str | None = Field(default=None, alias="apiVersion")
    metadata: ObjectMeta
    timestamp: Time
    window: Duration
    usage: dict[str, Quantity]


class NodeMetricsListV1(_Wire):
    """metrics.k8s.io/v1 NodeMetricsList."""

    kind: str
    api_version: str = Field(alias="apiVersion")
    metadata: ListMeta
    items: list[NodeMetricsV1]


_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_CUSTOM = "io.k8s.metrics.pkg.apis.custom_metrics"
_EXTERNAL = "io.k8s.metrics.pkg.apis.external_metrics.v1beta1"

#: Model -> Kubernetes definition name.
DEFINITIONS: Final[dict[type[BaseModel], str]] = {
    ObjectReference: "io.k8s.api.core.v1.ObjectReference",
    LabelSelectorRequirement: f"{_META}.LabelSelectorRequirement",
    LabelSelector: f"{_META}.LabelSelector",
    ListMeta: f"{_META}.ListMeta",
    MetricValueV1beta1: f"{_CUSTOM}.v1beta1.MetricValue",
    MetricValueListV1beta1: f"{_CUSTOM}.v1beta1.MetricValueList",
    MetricIdentifier: f"{_CUSTOM}.v1beta2.MetricIdentifier",
    MetricValueV1beta2: f"{_CUSTOM}.v1beta2.MetricValue",
    MetricValueListV1beta2: f"{_CUSTOM}.v1beta2.MetricValueList",
    ExternalMetricValue: f"{_EXTERNAL}.ExternalMetricValue",
    ExternalMetricValueList: f"{_EXTERNAL}.ExternalMetricValueList",
    APIResource: f"{_META}.APIResource",
    APIResourceList: f"{_META}.APIResourceList",
    GroupVersionForDiscovery: f"{_META}.GroupVersionForDiscovery",
    ServerAddressByClientCIDR: f"{_META}.ServerAddressByClientCIDR",
    APIGroup: f"{_META}.APIGroup",
    APIGroupList: f"{_META}.APIGroupList",
    StatusCause: f"{_META}.StatusCause",
    StatusDetails: f"{_META}.StatusDetails",
    Status: f"{_META}.Status",
}

_RESOURCE = "io.k8s.metrics.pkg.apis.metrics"

#: metrics.k8s.io v1beta1 and v1 models -> definition names (the same fields; upstream's types
#: live in one Go package per version, hence two names): in the OpenAPI documents only when the
#: Resource Metrics API is served (`--enable-metrics-api`, `--demo`).
METRICS_API_DEFINITIONS: Final[dict[type[BaseModel], str]] = {
    ObjectMeta: f"{_META}.ObjectMeta",
    ContainerMetrics: f"{_RESOURCE}.v1beta1.ContainerMetrics",
    PodMetrics: f"{_RESOURCE}.v1beta1.PodMetrics",
    PodMetricsList: f"{_RESOURCE}.v1beta1.PodMetricsList",
    NodeMetrics: f"{_RESOURCE}.v1beta1.NodeMetrics",
    NodeMetricsList: f"{_RESOURCE}.v1beta1.NodeMetricsList",
    ContainerMetricsV1: f"{_RESOURCE}.v1.ContainerMetrics",
    PodMetricsV1: f"{_RESOURCE}.v1.PodMetrics",
    PodMetricsListV1: f"{_RESOURCE}.v1.PodMetricsList",
    NodeMetricsV1: f"{_RESOURCE}.v1.NodeMetrics",
    NodeMetricsListV1: f"{_RESOURCE}.v1.NodeMetricsList",
}
#: The models of each metrics.k8s.io version: (PodMetrics, PodMetricsList, NodeMetrics,
#: NodeMetricsList).
METRICS_API_MODELS: Final[dict[str, tuple[type[BaseModel], ...]]] = {
    "v1": (PodMetricsV1, PodMetricsListV1, NodeMetricsV1, NodeMetricsListV1),
    "v1beta1": (PodMetrics, PodMetricsList, NodeMetrics, NodeMetricsList),
}
