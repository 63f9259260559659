"""Hostile names and bad backend values against the real server over TLS (security.md checklist
items 27 and 35): never a 500 for a name, never a body that is not valid UTF-8 JSON, and a
backend value JSON cannot carry (NaN, ±Inf) is a masked 500 `Status`, never invalid JSON."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from custom_metrics_server.testing.server_process import ServerProcess as RunningServer
from custom_metrics_server.testing.server_process import start_server, stop_server

P = "/apis/custom.metrics.k8s.io/v1beta2"
E = "/apis/external.metrics.k8s.io/v1beta1"

NAMES = {
    "e-acute": "%C3%A9",
    "nul": "%00",
    "newline": "a%0Ab",
    "del": "%7F",
    "rtl-mark": "%E2%80%8F",
    "rtl-override": "%E2%80%AE",
    "emoji": "%F0%9F%98%80",
    "invalid-utf8": "%FF%FE",
    "10-kib": "n" * 10240,
}


def _utf8_json(response: httpx.Response) -> dict[str, object]:
    """The body, decoded strictly: valid UTF-8 and valid JSON."""
    text = response.content.decode("utf-8")  # raises on invalid UTF-8
    body = orjson.loads(text)
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_27_unicode_and_control_characters_in_names_are_4xx_statuses_in_utf8_json(
    contract_server: RunningServer, name: str
) -> None:
    with contract_server.client() as client:
        for path in (
            f"{P}/namespaces/ns/pods/{name}/some-metric",  # object name
            f"{P}/namespaces/ns/pods/*/{name}",  # metric name
            f"{P}/namespaces/ns/{name}/*/some-metric",  # resource
            f"{P}/nodes/{name}/some-metric",
            f"{P}/namespaces/{name}/metrics/some-metric",
        ):
            response = client.get(path)
            assert response.status_code in {400, 404, 414}, (path[:120], response.text[:300])
            body = _utf8_json(response)
            assert body["kind"] == "Status"
            assert body["code"] == response.status_code
        # Lists in a namespace that cannot exist are empty, as upstream's (no object matches).
        for path in (f"{P}/namespaces/{name}/pods/*/some-metric", f"{E}/namespaces/{name}/m"):
            response = client.get(path)
            assert response.status_code in {200, 414}, (path[:120], response.text[:300])
            body = _utf8_json(response)
            if response.status_code == 200:
                assert body["items"] == []
        assert client.get(f"{P}/namespaces/ns/pods/*/some-metric").status_code == 200


def test_27_names_are_echoed_escaped_not_raw(contract_server: RunningServer) -> None:
    with contract_server.client() as client:
        body = _utf8_json(client.get(f"{P}/namespaces/ns/pods/a%00b%0A%E2%80%AE/some-metric"))
    assert (
        body["message"]
        == "the server could not find the metric some-metric for pods a\x00b\n\u202e"
    )


@pytest.fixture(scope="module")
def non_finite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    workdir = tmp_path_factory.mktemp("non-finite")
    fixture = workdir / "values.yaml"
    fixture.write_text(
        """
objects:
- {resource: pods, namespace: ns, name: nan}
- {resource: pods, namespace: ns, name: inf}
- {resource: pods, namespace: ns, name: fine}
values:
- {resource: pods, namespace: ns, name: nan, metric: m, value: .nan}
- {resource: pods, namespace: ns, name: inf, metric: m, value: .inf}
- {resource: pods, namespace: ns, name: fine, metric: m, value: 1e300}
- {resource: pods, namespace: ns, name: fine, metric: ok, value: 3}
external:
- {metric: minus_inf, value: -.inf}
"""
    )
    server = start_server(Path(workdir), "--demo-file", str(fixture))
    yield server
    stop_server(server)


INTERNAL_ERROR = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": 'an error on the server ("") has prevented the request from succeeding',
    "reason": "InternalError",
    "details": {},
    "code": 500,
}


def test_35_non_finite_backend_values_are_a_500_status_never_invalid_json(
    non_finite_server: RunningServer,
) -> None:
    with non_finite_server.client() as client:
        for path in (
            f"{P}/namespaces/ns/pods/nan/m",
            f"{P}/namespaces/ns/pods/inf/m",
            f"{P}/namespaces/ns/pods/*/m",  # one bad value spoils the list, not the JSON
            f"{E}/namespaces/ns/minus_inf",
        ):
            response = client.get(path)
            assert response.status_code == 500, path
            assert _utf8_json(response) == INTERNAL_ERROR
            assert response.headers["audit-id"]
        huge = client.get(f"{P}/namespaces/ns/pods/fine/m")  # finite, however large: served
        assert huge.status_code == 200
        assert _utf8_json(huge)["items"][0]["value"] == "1e300"  # type: ignore[index]
        assert client.get(f"{P}/namespaces/ns/pods/fine/ok").status_code == 200
        assert client.get("/readyz").status_code == 200
