"""Reading the `resourceRules` section of the configuration file (prometheus-adapter's resource
metrics: the container and node queries of `cpu` and `memory`, their window and server).

Owns that section; it must not query anything (`prometheus.usage` runs the queries). Cost: O(size
of the section), at start and on each reload.

PURE: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from custom_metrics_server.machinery.durations import parse_prometheus_duration
from custom_metrics_server.prometheus.config_fields import FieldReader, resources_block
from custom_metrics_server.prometheus.rules import (
    DEFAULT_SERVER,
    ResourceRule,
    ResourceRules,
    ServerConfig,
)

__all__ = ["parse_resource_rules"]


def _resource_rule(reader: FieldReader, raw: object, part: str) -> ResourceRule:
    rule = reader.mapping(raw, part)
    reader.unknown(
        rule, frozenset({"containerQuery", "nodeQuery", "resources", "containerLabel"}), f"{part}."
    )
    queries = {
        query: reader.template(
            reader.string(rule.get(query), f"{part}.{query}", required=True),
            f"{part}.{query}",
            "resource-query",
        )
        for query in ("containerQuery", "nodeQuery")
    }
    overrides, template, _ = resources_block(reader, rule.get("resources"), external=True)
    return ResourceRule(
        container_query=queries["containerQuery"],
        node_query=queries["nodeQuery"],
        container_label=reader.string(rule.get("containerLabel"), f"{part}.containerLabel")
        or "container",
        overrides=overrides,
        resource_template=template,
    )


def parse_resource_rules(
    raw: object, servers: Mapping[str, ServerConfig], warnings: list[str]
) -> ResourceRules | None:
    """The compiled `resourceRules`, or None when the file has none."""
    if raw is None:
        return None
    reader = FieldReader("resourceRules", warnings)
    data = reader.mapping(raw, "resourceRules")
    reader.unknown(data, frozenset({"cpu", "memory", "window", "server"}), "")
    cpu = _resource_rule(reader, data.get("cpu"), "cpu")
    memory = _resource_rule(reader, data.get("memory"), "memory")
    window = 60
    if data.get("window") is not None:
        try:
            window = max(
                1, round(parse_prometheus_duration(reader.string(data["window"], "window")))
            )
        except ValueError as err:
            raise reader.fail("window", str(err)) from None
    server = reader.string(data.get("server"), "server") or DEFAULT_SERVER
    if server not in servers:
        known = ", ".join(sorted(servers)) or "none"
        raise reader.fail("server", f"names no configured Prometheus server (known: {known})")
    return ResourceRules(cpu=cpu, memory=memory, window=window, server=server)
