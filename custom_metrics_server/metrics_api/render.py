"""How metrics.k8s.io objects look on the wire: discovery, quantities, object metadata, the
NotFound Status and the `meta.k8s.io` Table, as metrics-server writes them.

PURE: no I/O. This module owns the rendering pieces of :mod:`.responses` that do not depend
on the cluster or the usage store: the discovery documents, `cpu` as a canonical nanocore
quantity (`12345678n`, `1500u`, `2`), `memory` as a BinarySI quantity, `ObjectMeta` in Go
field order, the `apierrors.NewNotFound` Status, and :func:`metrics_table` (metrics-server's
`table.go` columns: Name, one quantity column per resource, Window). It must not look
anything up.

Cost: O(digits) per quantity; a Table is O(items x containers).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Final

from custom_metrics_server.errors import NotFound
from custom_metrics_server.machinery.quantity import Format, Quantity, format_quantity

__all__ = [
    "api_group",
    "api_resource_list",
    "memory_quantity",
    "metadata",
    "metrics_table",
    "nanocores_quantity",
    "not_found",
]


def api_group(group: str, versions: tuple[str, ...]) -> dict[str, Any]:
    """`APIGroup` of `/apis/{group}` serving `versions`, the first preferred."""
    entries = [{"groupVersion": f"{group}/{version}", "version": version} for version in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": dict(entries[0]),
    }


def api_resource_list(group_version: str) -> dict[str, Any]:
    """`APIResourceList` of `/apis/metrics.k8s.io/{v1,v1beta1}`, as metrics-server lists
    v1beta1 (the same resources in both versions)."""

    def entry(name: str, namespaced: bool, kind: str) -> dict[str, Any]:
        return {
            "name": name,
            "singularName": "",
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get", "list"],
        }

    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            entry("nodes", False, "NodeMetrics"),
            entry("pods", True, "PodMetrics"),
        ],
    }


_NANO_SUFFIXES: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T"}


def nanocores_quantity(nanocores: int) -> str:
    """`resource.NewScaledQuantity(n, -9).String()` (DecimalSI): `12345678n`, `1500u`, `3m`,
    `2`. O(digits)."""
    if nanocores == 0:
        return "0"
    sign = "-" if nanocores < 0 else ""
    digits = str(abs(nanocores))
    stripped = digits.rstrip("0")
    zeros = len(digits) - len(stripped)
    zeros -= zeros % 3
    exponent = -9 + zeros
    suffix = _NANO_SUFFIXES.get(exponent)
    if suffix is None:  # beyond tera-cores: the general (exact) formatter decides
        return format_quantity(Decimal(nanocores).scaleb(-9))
    mantissa = digits[: len(digits) - zeros] if zeros else digits
    return sign + mantissa + suffix


def memory_quantity(memory_bytes: int) -> str:
    return format_quantity(memory_bytes, Format.BINARY_SI)


def metadata(
    name: str, namespace: str | None, created: str | None, labels: Mapping[str, str]
) -> dict[str, Any]:
    """ObjectMeta in Go field order: name, namespace, creationTimestamp, labels (omitempty)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["creationTimestamp"] = created
    if labels:
        metadata["labels"] = dict(sorted(labels.items()))
    return metadata


def not_found(group: str, resource: str, name: str) -> NotFound:
    """`apierrors.NewNotFound`: `resource.group "name" not found`, with its details."""
    qualified = f"{resource}.{group}" if group else resource
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return NotFound(f'{qualified} "{name}" not found', details=details)


def metrics_table(
    document: dict[str, Any], *, version: str = "v1", include_object: str = "Metadata"
) -> dict[str, Any]:
    """A `meta.k8s.io` Table of a PodMetrics/NodeMetrics object or list, with
    metrics-server's columns (Name, one quantity column per resource, Window) and rows
    whose `object` follows `includeObject` (None, Metadata as PartialObjectMetadata, or
    the Object). No items: null columns and rows, as Go encodes nil slices."""
    kind = document.get("kind", "")
    single = kind in ("PodMetrics", "NodeMetrics")
    item_kind = kind if single else kind.removesuffix("List")
    api_version = document["apiVersion"]  # metrics.k8s.io/v1 or v1beta1
    items = [document] if single else list(document.get("items", ()))
    columns: list[dict[str, Any]] | None = None
    rows: list[dict[str, Any]] = []
    names: list[str] = []
    for item in items:
        usage = _table_usage(item)
        if columns is None:
            names = sorted(usage)
            columns = [_column("Name", "name", "Name of the resource")]
            columns += [_column(name, "quantity") for name in names]
            columns.append(_column("Window", "duration"))
        cells: list[Any] = [item["metadata"]["name"]]
        cells += [usage.get(name, "0") for name in names]
        cells.append(item["window"])
        row_object = _row_object(item, item_kind, api_version, version, include_object)
        rows.append({"cells": cells, "object": row_object})
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {},
        "columnDefinitions": columns,
        "rows": rows or None,
    }


def _row_object(
    item: dict[str, Any], kind: str, api_version: str, version: str, include_object: str
) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        if "kind" in item:
            return item
        return {"kind": kind, "apiVersion": api_version, **item}
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": item["metadata"],
    }


def _column(name: str, fmt: str, description: str = "") -> dict[str, Any]:
    """`TableColumnDefinition` (every field written, Go has no omitempty on them)."""
    return {
        "name": name,
        "type": "string",
        "format": fmt,
        "description": description,
        "priority": 0,
    }


def _table_usage(item: dict[str, Any]) -> dict[str, str]:
    """The usage cells of a row: a node's usage, or a pod's containers summed per resource
    (Go's `Quantity.Add` keeps the addend's format, then `String()`). O(containers)."""
    if "usage" in item:
        return dict(item["usage"])
    totals: dict[str, Quantity] = {}
    for container in item.get("containers", ()):
        for resource, text in container["usage"].items():
            value = Quantity.parse(text)
            total = totals.get(resource)
            totals[resource] = value if total is None else total + value
    return {resource: str(total) for resource, total in totals.items()}
