"""OpenAPI documents: checked-in copies are current, served copies equal them, and they
describe what the server really sends."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import orjson

from custom_metrics_server.api import openapi

ROOT = Path(__file__).parent.parent.parent


def test_checked_in_specs_are_current() -> None:
    assert openapi.main(["--check", str(ROOT / "openapi")]) == 0, "run `make update-openapi`"


def test_check_fails_on_a_stale_copy(tmp_path: Path) -> None:
    assert openapi.main(["--write", str(tmp_path)]) == 0
    (tmp_path / "swagger.json").write_text("{}")
    assert openapi.main(["--check", str(tmp_path)]) == 1


async def test_served_v2_equals_the_checked_in_document(asgi_client: httpx.AsyncClient) -> None:
    served = (await asgi_client.get("/openapi/v2")).json()
    assert served == orjson.loads((ROOT / "openapi" / "swagger.json").read_bytes())


async def test_v3_root_links_every_group_version_with_its_hash(
    asgi_client: httpx.AsyncClient,
) -> None:
    root = (await asgi_client.get("/openapi/v3")).json()
    assert set(root["paths"]) == {
        "apis/custom.metrics.k8s.io/v1beta2",
        "apis/custom.metrics.k8s.io/v1beta1",
        "apis/custom-metrics/v1alpha1",
        "apis/external.metrics.k8s.io/v1beta1",
    }
    for entry in root["paths"].values():
        url = entry["serverRelativeURL"]
        document = await asgi_client.get(url)
        assert document.status_code == 200
        assert url.endswith("?hash=" + hashlib.sha512(document.content).hexdigest().upper())
        assert document.json()["openapi"] == "3.0.0"
    assert (await asgi_client.get("/openapi/v3/apis/apps/v1")).status_code == 404


def test_every_reference_resolves() -> None:
    v2 = openapi.build_v2()
    refs = {
        node for node in _walk(v2) if isinstance(node, str) and node.startswith("#/definitions/")
    }
    assert refs
    assert {ref.removeprefix("#/definitions/") for ref in refs} <= set(v2["definitions"])
    for document in openapi.build_v3().values():
        schemas = document["components"]["schemas"]
        refs = {
            n
            for n in _walk(document)
            if isinstance(n, str) and n.startswith("#/components/schemas/")
        }
        assert {ref.removeprefix("#/components/schemas/") for ref in refs} <= set(schemas)


def test_metric_value_required_fields_match_the_go_openapi() -> None:
    definitions = openapi.build_v2()["definitions"]
    v1beta1 = definitions["io.k8s.metrics.pkg.apis.custom_metrics.v1beta1.MetricValue"]
    assert sorted(v1beta1["required"]) == ["describedObject", "metricName", "timestamp", "value"]
    v1beta2 = definitions["io.k8s.metrics.pkg.apis.custom_metrics.v1beta2.MetricValue"]
    assert sorted(v1beta2["required"]) == ["describedObject", "metric", "timestamp", "value"]
    assert definitions["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] == "string"


def _walk(node: object) -> list[object]:
    found: list[object] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
        else:
            found.append(current)
    return found
