"""Reading the prometheus-adapter configuration file: parsed, validated, compiled into rules.

PURE. Reads prometheus-adapter's YAML unchanged (`rules`, `externalRules`, `resourceRules`) and
adds three optional keys of our own, each ignored by nothing else:

* top-level `servers: [{name, url, caFile, tokenFile, headers, insecureSkipVerify}]`, and a
  rule-level `server: <name>`: several Prometheus-compatible servers, each rule choosing one
  (the default server is the `--prometheus-url` one, named `default`);
* rule-level `absent: error | zero | last-good`: what a request for an object without a series
  gets, a 404 as upstream (`error`, the default), the value 0 (an idle app has no request
  series, and an HPA on `<unknown>` cannot scale it down) or its last value served while it is
  at most `maxAge` old; `failure: error | zero | last-good`, the same when Prometheus fails
  (unreachable, slow, a 5xx); `maxAge: <duration>`, after which a sample is treated as absent
  (the failure policy, docs/operations.md; the query layer applies all but `absent: zero`,
  which the backend answers itself as it always did);
* rule-level `window: <duration>`: the `windowSeconds` to report, when the one read from the
  query's range selector is not right.

Every error names the rule (`rules[2]`, with its seriesQuery) and the field. Unknown fields are
collected as warnings, not errors, because Go's YAML decoding ignores them and configurations
in the wild carry typos (the upstream sample has `metricQuery`).

This module owns :func:`parse_config` and nothing else: the compiled values and their meaning
are :mod:`.rules` (`name.as` defaults to `$0` or `$1` here, `namespaced: false` for external
rules), and it must not query anything.

Cost: O(size of the file), once at start and on each reload.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import yaml

from custom_metrics_server.machinery.durations import parse_prometheus_duration
from custom_metrics_server.prometheus.gotemplate import Template
from custom_metrics_server.prometheus.gotemplate_values import TemplateError
from custom_metrics_server.prometheus.promql import LABEL_NAME
from custom_metrics_server.prometheus.rules import (
    DEFAULT_SERVER,
    AdapterConfig,
    ConfigError,
    ResourceRule,
    ResourceRules,
    Rule,
    SeriesFilter,
    ServerConfig,
    label_pattern,
)

__all__ = ["DEFAULT_METRICS_QUERY", "parse_config"]

#: What prometheus-adapter renders when a rule has no `metricsQuery` would be an empty query
#: (an error on every request); this is the query its docs use for plain gauges.
DEFAULT_METRICS_QUERY: Final = "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
_RULE_KEYS: Final = frozenset(
    {
        "seriesQuery",
        "seriesFilters",
        "resources",
        "name",
        "metricsQuery",
        "labelValueReplacements",
        "server",
        "absent",
        "failure",
        "maxAge",
        "window",
    }
)
_ANSWERS: Final = ("error", "zero", "last-good")
_TOP_KEYS: Final = frozenset({"rules", "externalRules", "resourceRules", "servers"})


class _Reader:
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


def _answer(text: str) -> Literal["error", "zero", "last-good"]:
    return "zero" if text == "zero" else "last-good" if text == "last-good" else "error"


def _policy(
    reader: _Reader, data: Mapping[str, Any]
) -> tuple[
    Literal["error", "zero", "last-good"], Literal["error", "zero", "last-good"], float | None
]:
    """A rule's failure policy: `absent`, `failure` (error, zero, last-good) and `maxAge`."""
    answers = []
    for key in ("absent", "failure"):
        answer = reader.string(data.get(key), key) or "error"
        if answer not in _ANSWERS:
            raise reader.fail(key, f"must be `error`, `zero` or `last-good`, not {answer!r}")
        answers.append(answer)
    max_age: float | None = None
    if data.get("maxAge") is not None:
        try:
            max_age = parse_prometheus_duration(reader.string(data["maxAge"], "maxAge"))
        except ValueError as err:
            raise reader.fail("maxAge", str(err)) from None
        if max_age <= 0:
            raise reader.fail("maxAge", "must be above zero")
    if "last-good" in answers and max_age is None:
        raise reader.fail("maxAge", "is required with last-good (how old a value may be served)")
    return _answer(answers[0]), _answer(answers[1]), max_age


def _filters(reader: _Reader, raw: object) -> list[SeriesFilter]:
    filters: list[SeriesFilter] = []
    raw_filters = raw or []
    if not isinstance(raw_filters, list):
        raise reader.fail("seriesFilters", "must be a list")
    for index, raw_filter in enumerate(raw_filters):
        path = f"seriesFilters[{index}]"
        entry = reader.mapping(raw_filter, path)
        is_ = reader.string(entry.get("is"), f"{path}.is")
        is_not = reader.string(entry.get("isNot"), f"{path}.isNot")
        if is_ and is_not:
            raise reader.fail(path, "cannot have both an `is` and an `isNot` expression")
        if not is_ and not is_not:
            raise reader.fail(path, "must have either an `is` or an `isNot` expression")
        filters.append(SeriesFilter(reader.regex(is_ or is_not, path), positive=bool(is_)))
    return filters


def _resources(
    reader: _Reader, raw: object, *, external: bool
) -> tuple[dict[str, tuple[str, str]], Template | None, bool]:
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


def _replacements(reader: _Reader, raw: object) -> list[tuple[str, str]]:
    replacements: list[tuple[str, str]] = []
    raw_replacements = raw or []
    if not isinstance(raw_replacements, list):
        raise reader.fail("labelValueReplacements", "must be a list")
    for index, raw_replacement in enumerate(raw_replacements):
        path = f"labelValueReplacements[{index}]"
        entry = reader.mapping(raw_replacement, path)
        replacements.append(
            (
                reader.string(entry.get("find"), f"{path}.find"),
                reader.string(entry.get("replace"), f"{path}.replace"),
            )
        )
    return replacements


def _rule(
    raw: object,
    where: str,
    *,
    external: bool,
    servers: Mapping[str, ServerConfig],
    warnings: list[str],
) -> Rule:
    reader = _Reader(where, warnings)
    data = reader.mapping(raw, "rule")
    series_query = reader.string(data.get("seriesQuery"), "seriesQuery", required=True)
    reader.where = f"{where} (seriesQuery {series_query!r})"
    reader.unknown(data, _RULE_KEYS, "")
    if not series_query.strip():
        raise reader.fail("seriesQuery", "must not be empty")

    filters = _filters(reader, data.get("seriesFilters"))
    name = reader.mapping(data.get("name"), "name")
    reader.unknown(name, frozenset({"matches", "as"}), "name.")
    matches_text = reader.string(name.get("matches"), "name.matches")
    name_regex = reader.regex(matches_text or ".*", "name.matches")
    if matches_text:
        filters.append(SeriesFilter(name_regex, positive=True))
    name_as = reader.string(name.get("as"), "name.as")
    if not name_as:
        if name_regex.groups == 0:
            name_as = "$0"
        elif name_regex.groups == 1:
            name_as = "$1"
        else:
            raise reader.fail(
                "name.as", f"must be set: {matches_text!r} has {name_regex.groups} capture groups"
            )

    overrides, resource_template, namespaced_raw = _resources(
        reader, data.get("resources"), external=external
    )
    query_text = reader.string(data.get("metricsQuery"), "metricsQuery")
    if not query_text:
        warnings.append(f"{reader.where}: metricsQuery: missing; using {DEFAULT_METRICS_QUERY!r}")
        query_text = DEFAULT_METRICS_QUERY
    metrics_query = reader.template(query_text, "metricsQuery", "metrics-query")

    replacements = _replacements(reader, data.get("labelValueReplacements"))
    server = reader.string(data.get("server"), "server") or DEFAULT_SERVER
    if server not in servers:
        known = ", ".join(sorted(servers)) or "none"
        raise reader.fail("server", f"names no configured Prometheus server (known: {known})")
    absent, failure, max_age = _policy(reader, data)
    window: int | None = None
    if data.get("window") is not None:
        try:
            window = max(
                1, round(parse_prometheus_duration(reader.string(data["window"], "window")))
            )
        except ValueError as err:
            raise reader.fail("window", str(err)) from None
    return Rule(
        where=reader.where,
        external=external,
        series_query=series_query,
        filters=tuple(filters),
        name_regex=name_regex,
        name_as=name_as,
        overrides=overrides,
        resource_template=resource_template,
        label_pattern=label_pattern(resource_template) if resource_template else None,
        metrics_query=metrics_query,
        namespaced=namespaced_raw,
        server=server,
        absent=absent,
        failure=failure,
        max_age=max_age,
        window=window,
        replacements=tuple(replacements),
    )


def _servers(
    raw: object, default: ServerConfig | None, warnings: list[str]
) -> dict[str, ServerConfig]:
    servers: dict[str, ServerConfig] = {}
    if default is not None:
        servers[DEFAULT_SERVER] = default
    if raw is None:
        return servers
    if not isinstance(raw, list):
        raise ConfigError("servers: must be a list")
    for index, entry in enumerate(raw):
        reader = _Reader(f"servers[{index}]", warnings)
        data = reader.mapping(entry, "server")
        reader.unknown(
            data,
            frozenset(
                {
                    "name",
                    "url",
                    "caFile",
                    "tokenFile",
                    "headers",
                    "insecureSkipVerify",
                    "clientCertFile",
                    "clientKeyFile",
                }
            ),
            "",
        )
        name = reader.string(data.get("name"), "name", required=True)
        url = reader.string(data.get("url"), "url", required=True)
        if not url.startswith(("http://", "https://")):
            raise reader.fail("url", f"must be an http:// or https:// URL, not {url!r}")
        if name in servers:
            raise reader.fail("name", f"{name!r} is defined twice")
        headers = reader.mapping(data.get("headers"), "headers")
        skip = data.get("insecureSkipVerify", False)
        if not isinstance(skip, bool):
            raise reader.fail("insecureSkipVerify", "must be true or false")
        servers[name] = ServerConfig(
            name=name,
            url=url,
            ca_file=reader.string(data.get("caFile"), "caFile") or None,
            token_file=reader.string(data.get("tokenFile"), "tokenFile") or None,
            headers=tuple((str(k), str(v)) for k, v in headers.items()),
            insecure_skip_verify=skip,
            client_cert_file=reader.string(data.get("clientCertFile"), "clientCertFile") or None,
            client_key_file=reader.string(data.get("clientKeyFile"), "clientKeyFile") or None,
        )
    return servers


def _resource_rule(reader: _Reader, raw: object, part: str) -> ResourceRule:
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
    overrides, template, _ = _resources(reader, rule.get("resources"), external=True)
    return ResourceRule(
        container_query=queries["containerQuery"],
        node_query=queries["nodeQuery"],
        container_label=reader.string(rule.get("containerLabel"), f"{part}.containerLabel")
        or "container",
        overrides=overrides,
        resource_template=template,
    )


def _resource_rules(
    raw: object, servers: Mapping[str, ServerConfig], warnings: list[str]
) -> ResourceRules | None:
    if raw is None:
        return None
    reader = _Reader("resourceRules", warnings)
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


def parse_config(
    text: str, *, default_server: ServerConfig | None = None, source: str = "the configuration"
) -> AdapterConfig:
    """Parse and compile a configuration document; raise `ConfigError` naming what is wrong."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source} is not valid YAML: {err}") from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"{source} must be a mapping with `rules`/`externalRules`")
    warnings: list[str] = [
        f"{key}: unknown top-level field, ignored" for key in document if key not in _TOP_KEYS
    ]
    servers = _servers(document.get("servers"), default_server, warnings)
    compiled: dict[str, list[Rule]] = {"rules": [], "externalRules": []}
    for key in ("rules", "externalRules"):
        raw_rules = document.get(key) or []
        if not isinstance(raw_rules, Sequence) or isinstance(raw_rules, str):
            raise ConfigError(f"{key}: must be a list of rules")
        for index, raw in enumerate(raw_rules):
            compiled[key].append(
                _rule(
                    raw,
                    f"{key}[{index}]",
                    external=key == "externalRules",
                    servers=servers,
                    warnings=warnings,
                )
            )
    return AdapterConfig(
        rules=tuple(compiled["rules"]),
        external_rules=tuple(compiled["externalRules"]),
        resource_rules=_resource_rules(document.get("resourceRules"), servers, warnings),
        servers=servers,
        warnings=tuple(warnings),
    )
