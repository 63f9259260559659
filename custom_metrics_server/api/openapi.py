"""OpenAPI v2 and v3 documents generated from `schemas.py` and the served route table.

PURE. `/openapi/v2` is one Swagger 2.0 document for every served group version;
`/openapi/v3` is the Kubernetes root index (`{"paths": {"apis/<g>/<v>":
{"serverRelativeURL": ...?hash=<sha512>}}}`) with one OpenAPI 3.0 document per group version.
The same documents are checked into `openapi/`; `python -m custom_metrics_server.api.openapi
--check openapi` fails when they are stale and `--write openapi` refreshes them.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import sys
from pathlib import Path
from typing import Any, Final

import orjson
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from custom_metrics_server import __version__
from custom_metrics_server.api import schemas
from custom_metrics_server.api.grammar import CUSTOM_GROUP, EXTERNAL_GROUP, GROUP_VERSIONS
from custom_metrics_server.api.negotiation import SERVED_MEDIA_TYPES

#: metrics.k8s.io (the Resource Metrics API), described only when it is served.
METRICS_GROUP: Final = "metrics.k8s.io"
#: Its served versions, preferred first (metrics_api.request.VERSIONS; tests check they agree).
METRICS_VERSIONS: Final = ("v1", "v1beta1")
_ALL_DEFINITIONS: Final = {**schemas.DEFINITIONS, **schemas.METRICS_API_DEFINITIONS}

_DEFS: Final = "#/definitions/"
_QUERY_PARAMS: Final = {
    "labelSelector": "A selector to restrict the list of returned objects by their labels.",
    "metricLabelSelector": "A selector to restrict the metric's series by their labels.",
    "fieldSelector": "Only metadata.name and metadata.namespace are accepted.",
    "pretty": "If 'true', the output is indented.",
}
_EXTERNAL_QUERY_PARAMS: Final = {
    "labelSelector": "A selector on the metric's own labels.",
    "pretty": _QUERY_PARAMS["pretty"],
}
_LIST_QUERY_PARAMS: Final = {
    "labelSelector": _QUERY_PARAMS["labelSelector"],
    "fieldSelector": _QUERY_PARAMS["fieldSelector"],
    "pretty": _QUERY_PARAMS["pretty"],
}


def _strip(node: Any) -> Any:
    """JSON Schema from pydantic -> Swagger-compatible schema (no titles, nulls or defaults)."""
    if isinstance(node, list):
        return [_strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    if schemas.REF_MARKER in node:
        return {"$ref": _DEFS + node[schemas.REF_MARKER]}
    any_of = node.get("anyOf")
    if any_of is not None:
        kept = [option for option in any_of if option != {"type": "null"}]
        if len(kept) == 1:
            rest = {k: v for k, v in node.items() if k not in {"anyOf", "default", "title"}}
            return _strip({**kept[0], **rest})
    out = {}
    for key, value in node.items():
        if (
            (key == "title" and isinstance(value, str))
            or (key == "additionalProperties" and value is False)
            or (key == "default" and value is None)
        ):
            continue
        out[key] = _strip(value)
    return out


def definitions(*, metrics_api: bool = False) -> dict[str, Any]:
    """Every wire definition, keyed by its Kubernetes name, with `#/definitions/` refs (the
    metrics.k8s.io ones only with `metrics_api`)."""
    table = _ALL_DEFINITIONS if metrics_api else schemas.DEFINITIONS
    models: list[tuple[type[BaseModel], Any]] = [(model, "serialization") for model in table]
    _, top = models_json_schema(models, by_alias=True, ref_template=_DEFS + "{model}")
    renames = {model.__name__: name for model, name in table.items()}
    raw = orjson.dumps(top.get("$defs", {})).decode()
    for short, long in sorted(renames.items(), key=lambda item: -len(item[0])):
        raw = raw.replace(f'"{_DEFS}{short}"', f'"{_DEFS}{long}"')
    found = {renames.get(k, k): _strip(v) for k, v in orjson.loads(raw).items()}
    found.update(copy.deepcopy(schemas.STRING_DEFINITIONS))
    return dict(sorted(found.items()))


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": _DEFS + _ALL_DEFINITIONS[model]}


def _params(names: list[str], query: dict[str, str]) -> list[dict[str, Any]]:
    path = [
        {"name": name, "in": "path", "required": True, "type": "string", "uniqueItems": True}
        for name in names
    ]
    return path + [
        {"name": name, "in": "query", "type": "string", "uniqueItems": True, "description": text}
        for name, text in query.items()
    ]


def _operation(op_id: str, summary: str, response: type[BaseModel], tag: str) -> dict[str, Any]:
    return {
        "description": summary,
        "operationId": op_id,
        "produces": list(SERVED_MEDIA_TYPES),
        "schemes": ["https"],
        "tags": [tag],
        "responses": {
            "200": {"description": "OK", "schema": _ref(response)},
            "401": {"description": "Unauthorized"},
            "default": {"description": "Failure", "schema": _ref(schemas.Status)},
        },
    }


def _ident(text: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in text.replace("-", ".").split("."))


def group_version_paths(group: str, version: str) -> dict[str, Any]:
    """Swagger path items of one served group version."""
    base = f"/apis/{group}/{version}"
    tag = f"{_ident(group)}{_ident(version)}"
    paths: dict[str, Any] = {
        f"{base}/": {
            "get": _operation(
                f"get{tag}APIResources", "get available resources", schemas.APIResourceList, tag
            )
        }
    }
    if group == METRICS_GROUP:
        return {**paths, **_metrics_api_paths(base, tag, version)}
    if group == EXTERNAL_GROUP:
        paths[f"{base}/namespaces/{{namespace}}/{{metric}}"] = {
            "get": _operation(
                f"list{tag}NamespacedExternalMetricValue",
                "list the values of an external metric in a namespace",
                schemas.ExternalMetricValueList,
                tag,
            ),
            "parameters": _params(["namespace", "metric"], _EXTERNAL_QUERY_PARAMS),
        }
        return paths
    value_list = (
        schemas.MetricValueListV1beta2 if version == "v1beta2" else schemas.MetricValueListV1beta1
    )
    forms = [
        (
            f"{base}/{{resource}}/{{name}}/{{metric}}",
            "MetricValue",
            "a metric of cluster-scoped objects (or of namespaced objects across namespaces)",
            ["resource", "name", "metric"],
        ),
        (
            f"{base}/namespaces/{{namespace}}/{{resource}}/{{name}}/{{metric}}",
            "NamespacedMetricValue",
            "a metric of objects in a namespace",
            ["namespace", "resource", "name", "metric"],
        ),
        (
            f"{base}/namespaces/{{namespace}}/metrics/{{metric}}",
            "MetricValueForNamespace",
            "a metric of a namespace itself",
            ["namespace", "metric"],
        ),
    ]
    for path, name, summary, params in forms:
        paths[path] = {
            "get": _operation(f"list{tag}{name}", f"list {summary}", value_list, tag),
            "parameters": _params(params, _QUERY_PARAMS),
        }
    return paths


def _metrics_api_paths(base: str, tag: str, version: str) -> dict[str, Any]:
    """metrics.k8s.io/v1 or v1beta1: get and list of PodMetrics and NodeMetrics."""
    pod, pod_list, node, node_list = schemas.METRICS_API_MODELS[version]
    return {
        f"{base}/nodes": {
            "get": _operation(f"list{tag}NodeMetrics", "list NodeMetrics", node_list, tag),
            "parameters": _params([], _LIST_QUERY_PARAMS),
        },
        f"{base}/nodes/{{name}}": {
            "get": _operation(f"read{tag}NodeMetrics", "read NodeMetrics", node, tag),
            "parameters": _params(["name"], {"pretty": _QUERY_PARAMS["pretty"]}),
        },
        f"{base}/pods": {
            "get": _operation(
                f"list{tag}PodMetricsForAllNamespaces",
                "list PodMetrics of every namespace",
                pod_list,
                tag,
            ),
            "parameters": _params([], _LIST_QUERY_PARAMS),
        },
        f"{base}/namespaces/{{namespace}}/pods": {
            "get": _operation(
                f"list{tag}NamespacedPodMetrics",
                "list PodMetrics of a namespace",
                pod_list,
                tag,
            ),
            "parameters": _params(["namespace"], _LIST_QUERY_PARAMS),
        },
        f"{base}/namespaces/{{namespace}}/pods/{{name}}": {
            "get": _operation(f"read{tag}NamespacedPodMetrics", "read PodMetrics", pod, tag),
            "parameters": _params(["namespace", "name"], {"pretty": _QUERY_PARAMS["pretty"]}),
        },
    }


def _served(metrics_api: bool) -> dict[str, tuple[str, ...]]:
    if metrics_api:
        return {**GROUP_VERSIONS, METRICS_GROUP: METRICS_VERSIONS}
    return GROUP_VERSIONS


def _reachable(document: Any, defs: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The definitions a document refers to, transitively."""
    wanted: dict[str, Any] = {}
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(prefix):
                name = ref[len(prefix) :]
                if name not in wanted:
                    wanted[name] = defs[name]
                    pending.append(defs[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return dict(sorted(wanted.items()))


def build_v2(*, title: str = "custom-metrics-server", metrics_api: bool = False) -> dict[str, Any]:
    """The Swagger 2.0 document of every served group version (metrics.k8s.io with
    `metrics_api`)."""
    paths: dict[str, Any] = {}
    for group, versions in _served(metrics_api).items():
        for version in versions:
            paths.update(group_version_paths(group, version))
    return {
        "swagger": "2.0",
        "info": {"title": title, "version": __version__},
        "paths": dict(sorted(paths.items())),
        "definitions": definitions(metrics_api=metrics_api),
    }


def _to_v3(node: Any) -> Any:
    """Swagger 2 fragments -> OpenAPI 3.0 (refs, parameter schemas, responses)."""
    if isinstance(node, list):
        return [_to_v3(item) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str):
        return {"$ref": node["$ref"].replace(_DEFS, "#/components/schemas/")}
    return {key: _to_v3(value) for key, value in node.items()}


def _v3_path_item(item: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in item.items():
        if key == "parameters":
            out[key] = [
                {
                    "name": p["name"],
                    "in": p["in"],
                    **({"required": True} if p.get("required") else {}),
                    **({"description": p["description"]} if "description" in p else {}),
                    "schema": {"type": "string", "uniqueItems": True},
                }
                for p in value
            ]
            continue
        operation = {k: v for k, v in value.items() if k not in {"produces", "schemes"}}
        operation["responses"] = {
            code: {
                "description": response["description"],
                **(
                    {
                        "content": {
                            media: {"schema": _to_v3(response["schema"])}
                            for media in SERVED_MEDIA_TYPES
                        }
                    }
                    if "schema" in response
                    else {}
                ),
            }
            for code, response in value["responses"].items()
        }
        out[key] = operation
    return out


def build_v3(
    *, title: str = "custom-metrics-server", metrics_api: bool = False
) -> dict[str, dict[str, Any]]:
    """One OpenAPI 3.0 document per served group version, keyed `apis/<group>/<version>`."""
    defs = definitions(metrics_api=metrics_api)
    documents = {}
    for group, versions in _served(metrics_api).items():
        for version in versions:
            paths = group_version_paths(group, version)
            schemas_v3 = _to_v3(_reachable(paths, defs, _DEFS))
            documents[f"apis/{group}/{version}"] = {
                "openapi": "3.0.0",
                "info": {"title": title, "version": __version__},
                "paths": {path: _v3_path_item(item) for path, item in paths.items()},
                "components": {"schemas": schemas_v3},
            }
    return documents


def v3_root(documents: dict[str, bytes]) -> dict[str, Any]:
    """The `/openapi/v3` index with content hashes, as kube-apiserver serves it."""
    return {
        "paths": {
            key: {
                "serverRelativeURL": f"/openapi/v3/{key}?hash="
                + hashlib.sha512(body).hexdigest().upper()
            }
            for key, body in documents.items()
        }
    }


def rendered_files() -> dict[str, bytes]:
    """Checked-in file name -> content for `openapi/`: the default Swagger document, and
    every v3 group document (metrics.k8s.io's included, served only when enabled)."""
    files = {"swagger.json": orjson.dumps(build_v2(), option=orjson.OPT_INDENT_2) + b"\n"}
    for key, document in build_v3(metrics_api=True).items():
        name = "v3/" + key.replace("/", "__") + "_openapi.json"
        files[name] = orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"
    return files


def main(argv: list[str] | None = None) -> int:
    """`--write DIR` refreshes the checked-in specs; `--check DIR` fails when they are stale."""
    parser = argparse.ArgumentParser(prog="python -m custom_metrics_server.api.openapi")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="DIR")
    mode.add_argument("--check", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    files = rendered_files()
    if args.write:
        for name, content in files.items():
            target = args.write / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return 0
    stale = [
        name
        for name, content in files.items()
        if not (args.check / name).exists() or (args.check / name).read_bytes() != content
    ]
    if stale:
        print(
            "stale OpenAPI files: " + ", ".join(stale) + "; run `make update-openapi`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["CUSTOM_GROUP", "build_v2", "build_v3", "main", "rendered_files", "v3_root"]
