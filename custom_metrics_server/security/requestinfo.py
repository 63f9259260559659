"""Authorization attributes of a request, as k8s.io/apiserver's `RequestInfoFactory` derives them.

PURE: no I/O, no web framework. A port of `NewRequestInfo` (pkg/endpoints/request/requestinfo.go)
with the API prefixes of an aggregated server (`api` groupless, `apis` grouped), followed by
`GetAuthorizerAttributes` (pkg/endpoints/filters/authorization.go) with `AuthorizeWithSelectors`
on (beta, on by default since Kubernetes 1.32): for `list`/`watch`/`deletecollection` the
`labelSelector` and `fieldSelector` requirements ride along, converted as the SubjectAccessReview
webhook converts them (plugin/pkg/authorizer/webhook/webhook.go).

This module, not `grammar`, decides what is authorized: it sees every path (also the ones the
grammar rejects), so a request is authorized exactly as a Go aggregated server would authorize
it before anything about the path is revealed.

Cost: O(len(path)) for resource requests; the query string is parsed only when the verb may
become `list`/`watch` (no name in the path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NamedTuple
from urllib.parse import parse_qs

from custom_metrics_server.api.grammar import NAMESPACE_SUBRESOURCES
from custom_metrics_server.machinery.fields import split_term, split_terms, unescape_field_value
from custom_metrics_server.machinery.gostrings import parse_int64
from custom_metrics_server.machinery.label_parser import parse_selector_cached
from custom_metrics_server.machinery.labels import Operator
from custom_metrics_server.machinery.validation import SelectorError

_API_PREFIXES: Final = frozenset({"api", "apis"})
_GROUPLESS_PREFIXES: Final = frozenset({"api"})
_SPECIAL_VERBS: Final = frozenset({"proxy", "watch"})
_SPECIAL_VERBS_NO_SUBRESOURCES: Final = frozenset({"proxy"})
_VERBS_WITH_SELECTORS: Final = frozenset({"list", "watch", "deletecollection"})
_METHOD_VERBS: Final = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
_LABEL_OPERATORS: Final = {
    Operator.EQUALS: "In",
    Operator.DOUBLE_EQUALS: "In",
    Operator.IN: "In",
    Operator.NOT_EQUALS: "NotIn",
    Operator.NOT_IN: "NotIn",
    Operator.EXISTS: "Exists",
    Operator.DOES_NOT_EXIST: "DoesNotExist",
}


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One `metav1.LabelSelectorRequirement` / `FieldSelectorRequirement` of a SAR."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The requirement as the SAR carries it (`values` omitted when empty)."""
        document: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            document["values"] = list(self.values)
        return document


class RequestAttributes(NamedTuple):
    """`authorizer.Attributes` minus the user: what a SubjectAccessReview asks about.

    A named tuple, not a dataclass: built and hashed once per request (decision cache key).
    """

    resource_request: bool
    path: str
    verb: str
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    label_requirements: tuple[SelectorRequirement, ...] = ()
    field_requirements: tuple[SelectorRequirement, ...] = ()

    def sar_attributes(self) -> tuple[str, dict[str, Any]]:
        """(`resourceAttributes` | `nonResourceAttributes`, its JSON), Go field order, omitempty."""
        if not self.resource_request:
            non_resource: dict[str, Any] = {}
            if self.path:
                non_resource["path"] = self.path
            if self.verb:
                non_resource["verb"] = self.verb
            return "nonResourceAttributes", non_resource
        resource: dict[str, Any] = {
            key: value
            for key, value in (
                ("namespace", self.namespace),
                ("verb", self.verb),
                ("group", self.group),
                ("version", self.version),
                ("resource", self.resource),
                ("subresource", self.subresource),
                ("name", self.name),
            )
            if value
        }
        if self.field_requirements:
            resource["fieldSelector"] = {
                "requirements": [r.to_json() for r in self.field_requirements]
            }
        if self.label_requirements:
            resource["labelSelector"] = {
                "requirements": [r.to_json() for r in self.label_requirements]
            }
        return "resourceAttributes", resource

    def controlled_size(self) -> int:
        """Bytes of requester-controlled attributes (webhook.go `shouldCache`)."""
        return (
            len(self.namespace)
            + len(self.verb)
            + len(self.group)
            + len(self.version)
            + len(self.resource)
            + len(self.subresource)
            + len(self.name)
            + len(self.path)
        )


def _split_path(path: str) -> list[str]:
    trimmed = path.strip("/")
    return trimmed.split("/") if trimmed else []


def request_attributes(method: str, path: str, query_string: bytes | str) -> RequestAttributes:
    """`NewRequestInfo` + `GetAuthorizerAttributes` for one request (path already decoded)."""
    non_resource = RequestAttributes(resource_request=False, path=path, verb=method.lower())
    parts = _split_path(path)
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return non_resource
    prefix = parts[0]
    parts = parts[1:]
    group = ""
    if prefix not in _GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return non_resource
        group = parts[0]
        parts = parts[1:]
    version = parts[0]
    parts = parts[1:]
    verb_via_path = False
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            # Upstream returns an error here, which its filter turns into a 500; we authorize
            # what is known (a resource request with an empty verb), which no RBAC rule allows.
            return RequestAttributes(
                resource_request=True, path=path, verb="", group=group, version=version
            )
        verb = parts[0]
        parts = parts[1:]
        verb_via_path = True
    else:
        verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = subresource = name = ""
    if len(parts) >= 3 and verb not in _SPECIAL_VERBS_NO_SUBRESOURCES:
        subresource = parts[2]
    if len(parts) >= 2:
        name = parts[1]
    if len(parts) >= 1:
        resource = parts[0]
    query: dict[str, list[str]] | None = None
    if not name and verb == "get":
        query = _query(query_string)
        verb, name = _list_verb_and_name(query)
    if not name and verb == "delete":
        verb = "deletecollection"
    labels: tuple[SelectorRequirement, ...] = ()
    fields: tuple[SelectorRequirement, ...] = ()
    if not verb_via_path and verb in _VERBS_WITH_SELECTORS:
        if query is None:
            query = _query(query_string)
        if "fieldSelector" in query:
            fields = _field_requirements(query["fieldSelector"][0])
        if "labelSelector" in query:
            labels = _label_requirements(query["labelSelector"][0])
    return RequestAttributes(
        resource_request=True,
        path=path,
        verb=verb,
        group=group,
        version=version,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
        label_requirements=labels,
        field_requirements=fields,
    )


def _query(query_string: bytes | str) -> dict[str, list[str]]:
    text = (
        query_string.decode("utf-8", "replace") if isinstance(query_string, bytes) else query_string
    )
    return parse_qs(text, keep_blank_values=True) if text else {}


def _list_verb_and_name(query: dict[str, list[str]]) -> tuple[str, str]:
    """`list` or `watch`, and the name a `metadata.name` field selector pins (ListOptions)."""
    try:
        watch = _options_watch(query)
        field_name = _options_field_name(query)
    except ValueError:
        # DecodeParameters failed: upstream resets the options but still honours `watch`.
        values = query.get("watch") or []
        watch = bool(values) and values[0].lower() not in {"false", "0"}
        field_name = ""
    return ("watch" if watch else "list"), field_name


def _options_watch(query: dict[str, list[str]]) -> bool:
    for integer in ("timeoutSeconds", "limit"):
        if integer in query and parse_int64(query[integer][0]) is None:
            raise ValueError(f"{integer}: not an int64: {query[integer][0]!r}")
    if "labelSelector" in query:
        try:
            parse_selector_cached(query["labelSelector"][0])
        except SelectorError as err:
            raise ValueError(str(err)) from err
    values = query.get("watch") or []
    # Convert_Slice_string_To_bool: only "0" and "false" (any case) are false.
    return bool(values) and not (values[0] == "0" or values[0].lower() == "false")


def _options_field_name(query: dict[str, list[str]]) -> str:
    if "fieldSelector" not in query:
        return ""
    terms = _parse_fields(query["fieldSelector"][0])
    for field, operator, value in terms:
        if field == "metadata.name" and operator == "=":
            return value if _valid_path_segment(value) else ""
    return ""


def _valid_path_segment(name: str) -> bool:
    return name not in {".", ".."} and "/" not in name and "%" not in name


def _parse_fields(text: str) -> list[tuple[str, str, str]]:
    """`fields.ParseSelector` (no known-field check): (field, "=" | "!=", value), sorted terms."""
    found: list[tuple[str, str, str]] = []
    for term in sorted(split_terms(text)) if text else []:
        if not term:
            continue
        split = split_term(term)
        if split is None:
            raise ValueError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, operator, raw = split
        operator = "!=" if operator == "!=" else "="
        try:
            value = unescape_field_value(raw)
        except SelectorError as err:
            raise ValueError(str(err)) from err
        if field or value:
            found.append((field, operator, value))
    return found


def _field_requirements(text: str) -> tuple[SelectorRequirement, ...]:
    try:
        terms = _parse_fields(text)
    except ValueError:
        return ()
    return tuple(
        SelectorRequirement(field, "NotIn" if operator == "!=" else "In", (value,))
        for field, operator, value in terms
    )


def _label_requirements(text: str) -> tuple[SelectorRequirement, ...]:
    try:
        selector = parse_selector_cached(text)
    except SelectorError:
        return ()
    return tuple(
        SelectorRequirement(requirement.key, operator, requirement.values)
        for requirement in selector.requirements
        if (operator := _LABEL_OPERATORS.get(requirement.operator)) is not None
    )
