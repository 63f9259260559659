"""The message tables of every kind this server writes in Kubernetes protobuf.

PURE: data only. This module owns the `protowire.Message` tables, transcribed from the
`generated.proto` files of apimachinery (metav1: ListMeta, ObjectMeta, LabelSelector, Status,
discovery, GroupVersionKind), k8s.io/api (core ObjectReference, apidiscovery v2), custom-metrics,
external-metrics and metrics.k8s.io (v1beta1 and v1 share one set of messages): each field's
JSON name, number, kind and whether Go holds it behind a pointer. `KINDS` and `message_for`
pick the message of a top-level object. It must not encode anything itself (`protowire` does)
or build documents (`protobuf` and the APIs do).

Cost: the tables are built once at import; `message_for` is one dict lookup.
"""

from __future__ import annotations

from typing import Final

from custom_metrics_server.api.protowire import Field, Kind, Message

__all__ = [
    "API_GROUP",
    "API_GROUP_DISCOVERY",
    "API_GROUP_DISCOVERY_LIST",
    "API_GROUP_LIST",
    "API_RESOURCE",
    "API_RESOURCE_DISCOVERY",
    "API_RESOURCE_LIST",
    "API_SUBRESOURCE_DISCOVERY",
    "API_VERSION_DISCOVERY",
    "CONTAINER_METRICS",
    "EXTERNAL_METRIC_VALUE",
    "EXTERNAL_METRIC_VALUE_LIST",
    "GROUP_VERSION_KIND",
    "KINDS",
    "LABEL_SELECTOR",
    "LABEL_SELECTOR_REQUIREMENT",
    "LIST_META",
    "MANAGED_FIELDS_ENTRY",
    "METRIC_IDENTIFIER",
    "METRIC_VALUE_LIST_V1BETA1",
    "METRIC_VALUE_LIST_V1BETA2",
    "METRIC_VALUE_V1BETA1",
    "METRIC_VALUE_V1BETA2",
    "NODE_METRICS",
    "NODE_METRICS_LIST",
    "OBJECT_META",
    "OBJECT_REFERENCE",
    "OWNER_REFERENCE",
    "POD_METRICS",
    "POD_METRICS_LIST",
    "STATUS",
    "STATUS_CAUSE",
    "STATUS_DETAILS",
    "message_for",
]


def _message(name: str, *fields: Field) -> Message:
    return Message(name, fields)


# metav1 (apimachinery pkg/apis/meta/v1/generated.proto).
LIST_META: Final = _message(
    "ListMeta",
    Field("selfLink", 1, Kind.STRING),
    Field("resourceVersion", 2, Kind.STRING),
    Field("continue", 3, Kind.STRING),
    Field("remainingItemCount", 4, Kind.INT, pointer=True),
)
OWNER_REFERENCE: Final = _message(
    "OwnerReference",
    Field("kind", 1, Kind.STRING),
    Field("name", 3, Kind.STRING),
    Field("uid", 4, Kind.STRING),
    Field("apiVersion", 5, Kind.STRING),
    Field("controller", 6, Kind.BOOL, pointer=True),
    Field("blockOwnerDeletion", 7, Kind.BOOL, pointer=True),
)
MANAGED_FIELDS_ENTRY: Final = _message(
    "ManagedFieldsEntry",
    Field("manager", 1, Kind.STRING),
    Field("operation", 2, Kind.STRING),
    Field("apiVersion", 3, Kind.STRING),
    Field("time", 4, Kind.TIME, pointer=True),
    Field("fieldsType", 6, Kind.STRING),
    Field("fieldsV1", 7, Kind.RAW_JSON, pointer=True),
    Field("subresource", 8, Kind.STRING),
)
#: Current upstream ObjectMeta: field 15 (clusterName) is gone since Kubernetes 1.26.
OBJECT_META: Final = _message(
    "ObjectMeta",
    Field("name", 1, Kind.STRING),
    Field("generateName", 2, Kind.STRING),
    Field("namespace", 3, Kind.STRING),
    Field("selfLink", 4, Kind.STRING),
    Field("uid", 5, Kind.STRING),
    Field("resourceVersion", 6, Kind.STRING),
    Field("generation", 7, Kind.INT),
    Field("creationTimestamp", 8, Kind.TIME),
    Field("deletionTimestamp", 9, Kind.TIME, pointer=True),
    Field("deletionGracePeriodSeconds", 10, Kind.INT, pointer=True),
    Field("labels", 11, Kind.STRING_MAP),
    Field("annotations", 12, Kind.STRING_MAP),
    Field("ownerReferences", 13, Kind.MESSAGES, OWNER_REFERENCE),
    Field("finalizers", 14, Kind.STRINGS),
    Field("managedFields", 17, Kind.MESSAGES, MANAGED_FIELDS_ENTRY),
)
LABEL_SELECTOR_REQUIREMENT: Final = _message(
    "LabelSelectorRequirement",
    Field("key", 1, Kind.STRING),
    Field("operator", 2, Kind.STRING),
    Field("values", 3, Kind.STRINGS),
)
LABEL_SELECTOR: Final = _message(
    "LabelSelector",
    Field("matchLabels", 1, Kind.STRING_MAP),
    Field("matchExpressions", 2, Kind.MESSAGES, LABEL_SELECTOR_REQUIREMENT),
)
STATUS_CAUSE: Final = _message(
    "StatusCause",
    Field("reason", 1, Kind.STRING),
    Field("message", 2, Kind.STRING),
    Field("field", 3, Kind.STRING),
)
STATUS_DETAILS: Final = _message(
    "StatusDetails",
    Field("name", 1, Kind.STRING),
    Field("group", 2, Kind.STRING),
    Field("kind", 3, Kind.STRING),
    Field("causes", 4, Kind.MESSAGES, STATUS_CAUSE),
    Field("retryAfterSeconds", 5, Kind.INT),
    Field("uid", 6, Kind.STRING),
)
STATUS: Final = _message(
    "Status",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("status", 2, Kind.STRING),
    Field("message", 3, Kind.STRING),
    Field("reason", 4, Kind.STRING),
    Field("details", 5, Kind.MESSAGE, STATUS_DETAILS, pointer=True),
    Field("code", 6, Kind.INT),
)
GROUP_VERSION_FOR_DISCOVERY: Final = _message(
    "GroupVersionForDiscovery",
    Field("groupVersion", 1, Kind.STRING),
    Field("version", 2, Kind.STRING),
)
SERVER_ADDRESS_BY_CLIENT_CIDR: Final = _message(
    "ServerAddressByClientCIDR",
    Field("clientCIDR", 1, Kind.STRING),
    Field("serverAddress", 2, Kind.STRING),
)
API_GROUP: Final = _message(
    "APIGroup",
    Field("name", 1, Kind.STRING),
    Field("versions", 2, Kind.MESSAGES, GROUP_VERSION_FOR_DISCOVERY),
    Field("preferredVersion", 3, Kind.MESSAGE, GROUP_VERSION_FOR_DISCOVERY),
    Field("serverAddressByClientCIDRs", 4, Kind.MESSAGES, SERVER_ADDRESS_BY_CLIENT_CIDR),
)
API_GROUP_LIST: Final = _message("APIGroupList", Field("groups", 1, Kind.MESSAGES, API_GROUP))
API_RESOURCE: Final = _message(
    "APIResource",
    Field("name", 1, Kind.STRING),
    Field("namespaced", 2, Kind.BOOL),
    Field("kind", 3, Kind.STRING),
    Field("verbs", 4, Kind.VERBS, pointer=True),
    Field("shortNames", 5, Kind.STRINGS),
    Field("singularName", 6, Kind.STRING),
    Field("categories", 7, Kind.STRINGS),
    Field("group", 8, Kind.STRING),
    Field("version", 9, Kind.STRING),
    Field("storageVersionHash", 10, Kind.STRING),
)
API_RESOURCE_LIST: Final = _message(
    "APIResourceList",
    Field("groupVersion", 1, Kind.STRING),
    Field("resources", 2, Kind.MESSAGES, API_RESOURCE),
)

GROUP_VERSION_KIND: Final = _message(
    "GroupVersionKind",
    Field("group", 1, Kind.STRING),
    Field("version", 2, Kind.STRING),
    Field("kind", 3, Kind.STRING),
)

# apidiscovery.k8s.io/v2 (k8s.io/api apidiscovery/v2/generated.proto): the aggregated document.
# `responseKind` is a Go pointer; `serverIds` (9) is listed for completeness and never set.
API_SUBRESOURCE_DISCOVERY: Final = _message(
    "APISubresourceDiscovery",
    Field("subresource", 1, Kind.STRING),
    Field("responseKind", 2, Kind.MESSAGE, GROUP_VERSION_KIND, pointer=True),
    Field("acceptedTypes", 3, Kind.MESSAGES, GROUP_VERSION_KIND),
    Field("verbs", 4, Kind.STRINGS),
)
API_RESOURCE_DISCOVERY: Final = _message(
    "APIResourceDiscovery",
    Field("resource", 1, Kind.STRING),
    Field("responseKind", 2, Kind.MESSAGE, GROUP_VERSION_KIND, pointer=True),
    Field("scope", 3, Kind.STRING),
    Field("singularResource", 4, Kind.STRING),
    Field("verbs", 5, Kind.STRINGS),
    Field("shortNames", 6, Kind.STRINGS),
    Field("categories", 7, Kind.STRINGS),
    Field("subresources", 8, Kind.MESSAGES, API_SUBRESOURCE_DISCOVERY),
    Field("serverIds", 9, Kind.STRINGS),
)
API_VERSION_DISCOVERY: Final = _message(
    "APIVersionDiscovery",
    Field("version", 1, Kind.STRING),
    Field("resources", 2, Kind.MESSAGES, API_RESOURCE_DISCOVERY),
    Field("freshness", 3, Kind.STRING),
)
API_GROUP_DISCOVERY: Final = _message(
    "APIGroupDiscovery",
    Field("metadata", 1, Kind.MESSAGE, OBJECT_META),
    Field("versions", 2, Kind.MESSAGES, API_VERSION_DISCOVERY),
)
API_GROUP_DISCOVERY_LIST: Final = _message(
    "APIGroupDiscoveryList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, API_GROUP_DISCOVERY),
)

# core/v1 ObjectReference (k8s.io/api core/v1/generated.proto).
OBJECT_REFERENCE: Final = _message(
    "ObjectReference",
    Field("kind", 1, Kind.STRING),
    Field("namespace", 2, Kind.STRING),
    Field("name", 3, Kind.STRING),
    Field("uid", 4, Kind.STRING),
    Field("apiVersion", 5, Kind.STRING),
    Field("resourceVersion", 6, Kind.STRING),
    Field("fieldPath", 7, Kind.STRING),
)

# custom.metrics.k8s.io v1beta1 (also the legacy custom-metrics/v1alpha1 shape) and v1beta2.
METRIC_VALUE_V1BETA1: Final = _message(
    "MetricValue",
    Field("describedObject", 1, Kind.MESSAGE, OBJECT_REFERENCE),
    Field("metricName", 2, Kind.STRING),
    Field("timestamp", 3, Kind.TIME),
    Field("window", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
    Field("selector", 6, Kind.MESSAGE, LABEL_SELECTOR, pointer=True),
)
METRIC_VALUE_LIST_V1BETA1: Final = _message(
    "MetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, METRIC_VALUE_V1BETA1),
)
METRIC_IDENTIFIER: Final = _message(
    "MetricIdentifier",
    Field("name", 1, Kind.STRING),
    Field("selector", 2, Kind.MESSAGE, LABEL_SELECTOR, pointer=True),
)
METRIC_VALUE_V1BETA2: Final = _message(
    "MetricValue",
    Field("describedObject", 1, Kind.MESSAGE, OBJECT_REFERENCE),
    Field("metric", 2, Kind.MESSAGE, METRIC_IDENTIFIER),
    Field("timestamp", 3, Kind.TIME),
    Field("windowSeconds", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
)
METRIC_VALUE_LIST_V1BETA2: Final = _message(
    "MetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, METRIC_VALUE_V1BETA2),
)

# external.metrics.k8s.io v1beta1.
EXTERNAL_METRIC_VALUE: Final = _message(
    "ExternalMetricValue",
    Field("metricName", 1, Kind.STRING),
    Field("metricLabels", 2, Kind.STRING_MAP),
    Field("timestamp", 3, Kind.TIME),
    Field("window", 4, Kind.INT, pointer=True),
    Field("value", 5, Kind.QUANTITY),
)
EXTERNAL_METRIC_VALUE_LIST: Final = _message(
    "ExternalMetricValueList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, EXTERNAL_METRIC_VALUE),
)

# metrics.k8s.io v1beta1, and v1: the same names, numbers and kinds in both generated.proto files
# (k8s.io/metrics pkg/apis/metrics/v1beta1 and v1), so one table serves both versions.
CONTAINER_METRICS: Final = _message(
    "ContainerMetrics",
    Field("name", 1, Kind.STRING),
    Field("usage", 2, Kind.QUANTITY_MAP),
)
NODE_METRICS: Final = _message(
    "NodeMetrics",
    Field("metadata", 1, Kind.MESSAGE, OBJECT_META),
    Field("timestamp", 2, Kind.TIME),
    Field("window", 3, Kind.DURATION),
    Field("usage", 4, Kind.QUANTITY_MAP),
)
NODE_METRICS_LIST: Final = _message(
    "NodeMetricsList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, NODE_METRICS),
)
POD_METRICS: Final = _message(
    "PodMetrics",
    Field("metadata", 1, Kind.MESSAGE, OBJECT_META),
    Field("timestamp", 2, Kind.TIME),
    Field("window", 3, Kind.DURATION),
    Field("containers", 4, Kind.MESSAGES, CONTAINER_METRICS),
)
POD_METRICS_LIST: Final = _message(
    "PodMetricsList",
    Field("metadata", 1, Kind.MESSAGE, LIST_META),
    Field("items", 2, Kind.MESSAGES, POD_METRICS),
)

#: Message of each top-level kind. MetricValueList differs by version, see `message_for`.
KINDS: Final[dict[str, Message]] = {
    "APIGroupList": API_GROUP_LIST,
    "APIGroup": API_GROUP,
    "APIResourceList": API_RESOURCE_LIST,
    "APIGroupDiscoveryList": API_GROUP_DISCOVERY_LIST,
    "Status": STATUS,
    "ExternalMetricValueList": EXTERNAL_METRIC_VALUE_LIST,
    "NodeMetrics": NODE_METRICS,
    "NodeMetricsList": NODE_METRICS_LIST,
    "PodMetrics": POD_METRICS,
    "PodMetricsList": POD_METRICS_LIST,
}


def message_for(api_version: str, kind: str) -> Message:
    """The message of a top-level object. Raises KeyError for a kind we do not encode."""
    if kind == "MetricValueList":
        if api_version.endswith("/v1beta2"):
            return METRIC_VALUE_LIST_V1BETA2
        return METRIC_VALUE_LIST_V1BETA1  # v1beta1 and the legacy v1alpha1
    return KINDS[kind]
