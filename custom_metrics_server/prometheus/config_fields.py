"""Reading the fields of one entry of the prometheus-adapter configuration file: typed values,
regular expressions and templates, unknown keys collected as warnings, and every error naming the
entry and the field (`rules[2]: resources.template: ...`); plus the `resources:` block, which
rules and `resourceRules` share.

Owns field reading only; the sections are read by `rules_config` (rules), `servers_config` and
`resource_rules_config`, and nothing here compiles a rule or queries anything. Cost: O(size of
the entry), at start and on each reload.

PURE: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from custom_metrics_server.prometheus.gotemplate import Template
from custom_metrics_server.prometheus.gotemplate_values import TemplateError
from custom_metrics_server.prometheus.promql import LABEL_NAME
from custom_metrics_server.prometheus.rules import ConfigError

__all__ = ["FieldReader", "resources_block"]


class FieldReader:
    """Walks one rule's mapping, collecting warnings and raising errors that name it."""

    def __init__(self, where: str, warnings: list[str]) -> None:
        self.where = where
        self.warnings = warnings

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(f"{self.where}: {path}: {message}")

    def mapping(self, value: object, path: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be a mapping, not {type(value).__name__}")
        return value

    def string(self, value: object, path: str, *, required: bool = False) -> str:
        if value is None:
            if required:
                raise self.fail(path, "is required")
            return ""
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self.fail(path, f"must be a string, not {type(value).__name__}")
        return str(value)

    def regex(self, value: str, path: str) -> re.Pattern[str]:
        try:
            return re.compile(value)
        except re.error as err:
            raise self.fail(path, f"invalid regular expression {value!r}: {err}") from None

    def template(self, value: str, path: str, name: str) -> Template:
        try:
            return Template(value, name=name)
        except TemplateError as err:
            raise self.fail(path, str(err)) from None

    def unknown(self, data: Mapping[str, Any], known: frozenset[str], path: str) -> None:
        for key in data:
            if key not in known:
                self.warnings.append(f"{self.where}: {path}{key}: unknown field, ignored")


def resources_block(
    reader: FieldReader, raw: object, *, external: bool
) -> tuple[dict[str, tuple[str, str]], Template | None, bool]:
    """The `resources:` block: (label overrides, resource template, namespaced)."""
    resources = reader.mapping(raw, "resources")
    reader.unknown(resources, frozenset({"overrides", "template", "namespaced"}), "resources.")
    overrides: dict[str, tuple[str, str]] = {}
    for label, target in reader.mapping(resources.get("overrides"), "resources.overrides").items():
        path = f"resources.overrides.{label}"
        if not LABEL_NAME.fullmatch(str(label)):
            raise reader.fail(path, "is not a valid Prometheus label name")
        entry = reader.mapping(target, path)
        reader.unknown(entry, frozenset({"group", "resource"}), f"{path}.")
        resource = reader.string(entry.get("resource"), f"{path}.resource", required=True)
        overrides[str(label)] = (reader.string(entry.get("group"), f"{path}.group"), resource)
    template_text = reader.string(resources.get("template"), "resources.template")
    template = (
        reader.template(template_text, "resources.template", "resource-label")
        if template_text
        else None
    )
    if not external and not overrides and template is None:
        raise reader.fail("resources", "needs `overrides` or a `template` to name any object")
    namespaced = resources.get("namespaced", True)
    if not isinstance(namespaced, bool):
        raise reader.fail("resources.namespaced", "must be true or false")
    if not external and "namespaced" in resources:
        reader.warnings.append(f"{reader.where}: resources.namespaced: only external rules use it")
    return overrides, template, namespaced
