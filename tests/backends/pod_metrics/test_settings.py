"""The pod-metrics settings as the backends file gives them: validated by the type's pydantic
model through the loader, every problem at once naming the entry and the field; the example of
docs/backends.md is valid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from custom_metrics_server.backends.pod_metrics.settings import PodMetricsSettings
from custom_metrics_server.plugins.adapter import PluginError
from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import load_backends

DOCS = Path(__file__).resolve().parents[3] / "docs" / "backends.md"
WHERE = "backends[0] 'app' (type pod-metrics)"


def problems(settings: str) -> list[str]:
    text = f"backends:\n  - name: app\n    type: pod-metrics\n    settings: {settings}\n"
    config = parse_backends_file(text, source="b.yaml")
    with pytest.raises(PluginError) as caught:
        load_backends(config, base_dir=Path("/"), default_timeout=10.0)
    return str(caught.value).splitlines()


def test_every_problem_is_named_by_its_field() -> None:
    found = problems(
        "{metrics: ['bad name!'], interval: 2x, concurrency: 0, workloads: [pods],"
        " scrape: [{name: Web, port: 70000, selector: 'app in (', path: metrics,"
        " namespaces: [Shop]}], tls: {caFile: 3, verify: true}, sourceX: 1}"
    )
    assert found == [
        f"{WHERE}: settings.interval: invalid duration '2x' (examples: 15s, 500ms, 1m)",
        f"{WHERE}: settings.concurrency: Input should be greater than or equal to 1",
        f"{WHERE}: settings.metrics[0].name: 'bad name!' is not a metric name (letters, digits,"
        " _ and :, with * and ? as wildcards)",
        f"{WHERE}: settings.scrape[0].name: 'Web' is not a lower-case DNS label",
        f"{WHERE}: settings.scrape[0].port: port 70000 is not between 1 and 65535",
        f"{WHERE}: settings.scrape[0].path: 'metrics' is not an absolute path",
        f"{WHERE}: settings.scrape[0].namespaces: 'Shop' is not a namespace name",
        f"{WHERE}: settings.scrape[0].selector: invalid label selector 'app in (': unable to"
        " parse requirement: found '', expected: ',', ')' or identifier",
        f"{WHERE}: settings.workloads[0]: Input should be 'deployments', 'statefulsets',"
        " 'replicasets', 'daemonsets' or 'jobs'",
        f"{WHERE}: settings.tls.caFile: Input should be a valid string",
        f"{WHERE}: settings.tls.verify: unknown field",
        f"{WHERE}: settings.sourceX: unknown field",
    ]


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ("{metrics: [x]}", "nothing to scrape: give scrape configs or enable annotations"),
        (
            "{scrape: [{name: a, port: 1}, {name: b, port: 2, metrics: [y]}],"
            " annotations: {enabled: true}}",
            "no metrics are selected for scrape[0] (a), annotations: list the metrics to keep"
            " in metrics (or in each scrape config)",
        ),
        (
            "{metrics: [x], scrape: [{name: a, port: 1}, {name: a, port: 2}]}",
            "scrape config names must be unique: a",
        ),
        (
            "{metrics: [x], scrape: [{name: a, port: 1}], interval: 30s, staleAfter: 10s}",
            "staleAfter (10s) must be at least the interval (30s)",
        ),
    ],
)
def test_incoherent_settings_say_why(settings: str, problem: str) -> None:
    assert problems(settings) == [f"{WHERE}: settings: {problem}"]


def test_defaults_and_what_they_become() -> None:
    config = PodMetricsSettings.model_validate(
        {
            "metrics": ["a", {"name": "b_*", "labels": "code=200"}],
            "scrape": [{"name": "web", "port": "8080"}],
            "interval": "20s",
        }
    ).to_config(Path("/etc/cms"))
    assert config.source == "direct"
    assert config.interval == 20.0
    assert config.stale_after == 60.0  # three intervals
    assert config.scrape[0].port == 8080
    assert config.workloads == ("deployments", "statefulsets", "replicasets", "daemonsets", "jobs")
    assert config.workload_value == "sum"
    assert config.max_body_bytes == 10 << 20
    assert [str(rule.labels) for rule in config.metrics] == ["", "code=200"]
    assert config.annotations is None
    tls = PodMetricsSettings.model_validate(
        {"metrics": ["a"], "annotations": {"enabled": True}, "tls": {"caFile": "ca.pem"}}
    ).to_config(Path("/etc/cms"))
    assert tls.tls_ca_file == "/etc/cms/ca.pem"
    assert tls.annotations is not None
    assert tls.annotations.prefix == "custom-metrics-server.io"


def test_the_documented_example_is_valid() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Pods' own metrics") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None
    document = yaml.safe_load(block.group(1))
    (entry,) = [e for e in document["backends"] if e["type"] == "pod-metrics"]
    config = PodMetricsSettings.model_validate(entry["settings"]).to_config()
    assert config.scrape
    assert config.annotations is not None
