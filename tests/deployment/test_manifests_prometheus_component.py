"""The Prometheus component of manifests/: it builds, its flags parse with the real parser,
its rules load, and the mount matches --config."""

from __future__ import annotations

from pathlib import PurePosixPath

from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ServerConfig
from custom_metrics_server.prometheus.rules_config import parse_config
from tests.deployment.test_manifests import MANIFESTS, container, kustomize, one, serve_parser


def test_prometheus_overlay_builds_and_is_consistent() -> None:
    objects = kustomize(MANIFESTS / "overlays" / "prometheus")
    spec = container(objects)
    args = serve_parser().parse_args(spec["args"][1:])
    assert args.prometheus_url == "http://prometheus-k8s.monitoring.svc:9090/"
    assert args.metrics_relist_interval == 60.0
    config_path = PurePosixPath(str(args.config))
    mounts = {m["name"]: m for m in spec["volumeMounts"]}
    assert mounts["prometheus-rules"]["mountPath"] == str(config_path.parent)
    assert mounts["prometheus-rules"]["readOnly"] is True
    config_map = one(objects, "ConfigMap", "custom-metrics-server-prometheus-rules")
    assert config_map["metadata"]["namespace"] == "custom-metrics"
    config = parse_config(
        config_map["data"][config_path.name],
        default_server=ServerConfig(name=DEFAULT_SERVER, url=args.prometheus_url),
    )
    assert config.warnings == ()
    assert len(config.rules) == 2
    assert len(config.external_rules) == 1
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "prometheus-rules",
        "configMap": {"name": config_map["metadata"]["name"]},
    } in volumes
