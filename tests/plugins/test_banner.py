"""The demo banner's `Try:` block names what the backends actually list."""

from __future__ import annotations

import asyncio
from pathlib import Path

from custom_metrics_server.plugins.banner import try_lines
from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import Loaded, load_backends

P = "tests.fakes.plugins"


def _started(text: str) -> Loaded:
    loaded = load_backends(
        parse_backends_file(text, source="b.yaml"), base_dir=Path("/"), default_timeout=10.0
    )
    for built in loaded.built:
        asyncio.run(built.host.backend.__aenter__())
    return loaded


def test_a_plugin_s_own_metrics_are_what_the_banner_suggests(tmp_path: Path) -> None:
    loaded = _started(f"backends: [{{name: jobs, type: '{P}:instant'}}]")
    cert = tmp_path / "apiserver.crt"
    cert.write_text("pem")
    lines = try_lines(loaded, kubeconfig=Path("kc"), url="https://127.0.0.1:6443", cert_file=cert)
    assert lines == [
        "Try:",
        "  kubectl --kubeconfig kc get --raw "
        "'/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/instant_pod'",
        "  kubectl --kubeconfig kc get --raw "
        "'/apis/external.metrics.k8s.io/v1beta1/namespaces/default/instant_total'",
        "  kubectl --kubeconfig kc get --raw "
        "'/apis/external.metrics.k8s.io/v1beta1/namespaces/default/instant_total?explain=1'"
        "  # how it was answered",
        f"  curl --cacert {cert} 'https://127.0.0.1:6443"
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/instant_pod'",
    ]


def test_beside_the_demo_its_own_requests_come_first_then_the_plugin_s() -> None:
    loaded = _started(
        f"""
backends:
  - {{name: simulated, type: demo, settings: {{pods: 12}}}}
  - {{name: jobs, type: '{P}:instant'}}
"""
    )
    lines = try_lines(loaded, kubeconfig=Path("kc"), url="https://x", cert_file=None)
    assert [line.split("get --raw ")[-1] for line in lines[1:5]] == [
        "'/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/http_requests_per_second"
        "?labelSelector=app%3Dweb'",
        "'/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth'",
        "'/apis/custom.metrics.k8s.io/v1beta2/namespaces/default/pods/*/instant_pod'",
        "'/apis/external.metrics.k8s.io/v1beta1/namespaces/default/instant_total'",
    ]
    assert "  kubectl --kubeconfig kc top pods -A" in lines
    assert not any("curl" in line for line in lines)
