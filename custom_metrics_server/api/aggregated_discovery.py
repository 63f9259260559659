"""The aggregated discovery document: `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`, what
`/apis` (and the demo's `/api`) answer a client that asks for it (KEP-3352).

PURE: JSON-shaped dicts (exactly the JSON wire form, in Go field order) built from the plain
discovery documents this server already serves, so the two can never disagree. It must not
negotiate (`negotiation.negotiate_discovery` does), encode, cache or look anything up.

How a version's resources are built is upstream's `endpoints.ConvertGroupVersionIntoToDiscovery`
(k8s.io/apiserver `pkg/endpoints/installer.go`), the function kube-aggregator applies to a peer's
`/apis/<group>/<version>` when the peer has no aggregated document: so the aggregator publishes
the same resources whether it reads our v2 document or falls back to the per-version lists.

* an entry without `/` becomes a resource: `resource`, `responseKind` `{group: "", version: "",
  kind}` (empty group and version mean the entry's own, as kube-apiserver writes its built-ins),
  `scope` `Namespaced` or `Cluster`, `singularResource`, `verbs`;
* an entry `parent/sub` becomes a subresource of `parent`; a parent the list does not name is
  added with an empty `responseKind`, no verbs (JSON `null`) and the subresource's scope, as
  upstream does for custom metrics (`pods/http_requests` lists `pods` with subresource
  `http_requests`);
* a subresource whose scope differs from its parent's is upstream's conversion error: that
  version is then published as the aggregator publishes a peer it could not read, without
  resources and `freshness: Stale` (our own lists never do this);
* every other version is `freshness: Current`, as kube-apiserver marks its local groups.

Groups are ordered by name and versions keep the served preference order: kube-apiserver's
order for a server whose group versions all have the default priorities (1000, 15), where
versions sort by Kubernetes version order, which our preference order already is.

Cost: O(resources) per document; the server renders it once per served state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from custom_metrics_server.api.negotiation import AGGREGATED_KIND, AGGREGATED_PARAMS

__all__ = [
    "API_VERSION",
    "KIND",
    "content_type",
    "etag",
    "group_discovery_list",
    "version_resources",
]

API_VERSION: Final = "apidiscovery.k8s.io/v2"
KIND: Final = AGGREGATED_KIND
CURRENT: Final = "Current"
STALE: Final = "Stale"


def _scope(entry: Mapping[str, Any]) -> str:
    return "Namespaced" if entry.get("namespaced") else "Cluster"


def _kind(entry: Mapping[str, Any]) -> dict[str, str]:
    return {
        "group": entry.get("group", ""),
        "version": entry.get("version", ""),
        "kind": entry.get("kind", ""),
    }


def version_resources(api_resources: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`ConvertGroupVersionIntoToDiscovery` of a plain `APIResourceList`'s `resources`: the
    resources in list order (parents a subresource names added after them, in the order
    first named), each with its subresources. Raises ValueError when a subresource's scope
    is not its parent's. O(entries)."""
    entries = list(api_resources)
    resources: list[dict[str, Any]] = []
    parents: dict[str, dict[str, Any]] = {}
    for entry in entries:
        name = entry["name"]
        if "/" in name:
            continue
        resource: dict[str, Any] = {
            "resource": name,
            "responseKind": _kind(entry),
            "scope": _scope(entry),
            "singularResource": entry.get("singularName", ""),
            "verbs": entry.get("verbs"),
        }
        for optional in ("shortNames", "categories"):
            if entry.get(optional):
                resource[optional] = list(entry[optional])
        resources.append(resource)
        parents[name] = resource
    for entry in entries:
        parent_name, slash, sub = entry["name"].partition("/")
        if not slash:
            continue
        scope = _scope(entry)
        parent = parents.get(parent_name)
        if parent is None:
            parent = {
                "resource": parent_name,
                "responseKind": {"group": "", "version": "", "kind": ""},
                "scope": scope,
                "singularResource": "",
                "verbs": None,
            }
            resources.append(parent)
            parents[parent_name] = parent
        if parent["scope"] != scope:
            raise ValueError(
                f"Error: Parent {parent_name} (scope: {parent['scope']}) and subresource "
                f"{sub} (scope: {scope}) scope do not match"
            )
        kind = _kind(entry) if entry.get("kind") else {"group": "", "version": "", "kind": ""}
        parent.setdefault("subresources", []).append(
            {"subresource": sub, "responseKind": kind, "verbs": entry.get("verbs")}
        )
    return resources


def _version_entry(version: str, resource_list: Mapping[str, Any]) -> dict[str, Any]:
    try:
        resources = version_resources(resource_list.get("resources") or ())
    except ValueError:
        return {"version": version, "freshness": STALE}
    entry: dict[str, Any] = {"version": version}
    if resources:
        entry["resources"] = resources
    entry["freshness"] = CURRENT
    return entry


def _group_entry(name: str, versions: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    # ObjectMeta: `name` is omitempty (the legacy group "" has none), creationTimestamp null.
    metadata: dict[str, Any] = {"name": name} if name else {}
    metadata["creationTimestamp"] = None
    group: dict[str, Any] = {"metadata": metadata}
    entries = [_version_entry(version, resource_list) for version, resource_list in versions]
    if entries:
        group["versions"] = entries
    return group


def group_discovery_list(
    groups: Mapping[str, Sequence[tuple[str, Mapping[str, Any]]]],
) -> dict[str, Any]:
    """`APIGroupDiscoveryList` of `groups` (name -> (version, its plain `APIResourceList`) in
    preference order), groups sorted by name. O(resources)."""
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": {},
        "items": [_group_entry(name, groups[name]) for name in sorted(groups)],
    }


#: How `wire.dumps` starts the list: what `json.Marshal` of upstream's cached list (no TypeMeta)
#: does not have.
_TYPE_PREFIX: Final = f'{{"kind":"{KIND}","apiVersion":"{API_VERSION}",'.encode()


def etag(json_body: bytes) -> str:
    """The `ETag` of a list `wire.dumps` wrote: upstream's `calculateETag`, the upper-case hex
    SHA-512 of the list as `json.Marshal` writes it (without kind and apiVersion, no newline),
    in double quotes. One value for JSON and protobuf (the response varies by `Accept`).
    O(len(json_body))."""
    if not json_body.startswith(_TYPE_PREFIX):
        raise ValueError("not an APIGroupDiscoveryList written by wire.dumps")
    listed = b"{" + json_body[len(_TYPE_PREFIX) :].rstrip(b"\n")
    return '"' + hashlib.sha512(listed).hexdigest().upper() + '"'


def content_type(media_type: str) -> str:
    """The response's `Content-Type`: the media type with the kind's `g`, `v`, `as` parameters
    (`generateMediaTypeWithGVK`), which kube-aggregator and client-go check before decoding."""
    return media_type + AGGREGATED_PARAMS
