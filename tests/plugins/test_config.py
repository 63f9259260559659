"""The backends file: its schema and messages that name the entry and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from custom_metrics_server.plugins.config import (
    BackendsConfigError,
    parse_backends_file,
    read_backends_file,
)


def errors(text: str) -> list[str]:
    with pytest.raises(BackendsConfigError) as caught:
        parse_backends_file(text, source="b.yaml")
    return caught.value.lines


def test_a_full_file_parses_with_defaults_and_durations() -> None:
    config = parse_backends_file(
        """
defaults: {timeout: 2s, threads: 8, maxSeries: 100}
cluster: kube
backends:
  - name: kube
    type: kubernetes
  - name: orders
    type: postgres
    timeout: 500ms
    settings: {dsn: "postgresql://db/orders"}
    routes:
      - api: external
        metricRegex: "orders_(waiting|running)"
      - api: custom
        resource: deployments.apps
        metric: "orders_*"
        listed: true
""",
        source="b.yaml",
    )
    assert (config.defaults.timeout, config.defaults.threads, config.defaults.max_series) == (
        2.0,
        8,
        100,
    )
    orders = config.backends[1]
    assert (orders.timeout, orders.settings) == (0.5, {"dsn": "postgresql://db/orders"})
    assert orders.routes is not None
    assert orders.routes[0].metric_regex == "orders_(waiting|running)"
    assert orders.routes[1].listed is True
    assert config.backends[0].routes is None
    assert config.backends[0].settings == {}


def test_every_problem_is_reported_at_once_naming_the_entry_and_field() -> None:
    lines = errors(
        """
backends:
  - name: ok
    type: demo
  - name: orders
    type: postgres
    timeout: 2x
    routes: [{api: both}]
  - name: Bad_Name
    type: memory
  - type: fixture
"""
    )
    assert lines == [
        "b.yaml: backends[1] 'orders' (type postgres): routes[0].api: Input should be 'custom' or 'external'",
        "b.yaml: backends[1] 'orders' (type postgres): timeout: invalid duration '2x' (examples: 10s, 500ms)",
        "b.yaml: backends[2] 'Bad_Name' (type memory): name: 'Bad_Name' is not a lower-case DNS label (a-z, 0-9 and '-', at most 63)",
        "b.yaml: backends[3] (type fixture): name: field required",
    ]


def test_unknown_fields_are_refused() -> None:
    assert errors("backends: [{name: a, type: demo, setings: {}}]") == [
        "b.yaml: backends[0] 'a' (type demo): setings: unknown field"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "", "b.yaml: the file is empty, not a mapping with a backends list", id="empty"
        ),
        pytest.param(
            "- a\n", "b.yaml: the file is a list, not a mapping with a backends list", id="a-list"
        ),
        pytest.param(
            "backends: []\n",
            "b.yaml: backends: List should have at least 1 item after validation, not 0",
            id="no-backends",
        ),
        pytest.param(
            "backends: [{name: a, type: demo}, {name: a, type: demo}]\n",
            "b.yaml: backend names must be unique: a",
            id="duplicates",
        ),
        pytest.param(
            "cluster: nope\nbackends: [{name: a, type: demo}]\n",
            "b.yaml: cluster: no backend is named 'nope'",
            id="cluster-names-nobody",
        ),
        pytest.param("backends: [\n", "b.yaml: not YAML:", id="not-yaml"),
    ],
)
def test_file_level_problems(text: str, message: str) -> None:
    (line,) = errors(text)
    assert line.startswith(message)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BackendsConfigError, match=r"cannot read .*missing.yaml: No such file"):
        read_backends_file(tmp_path / "missing.yaml")


def test_the_digest_follows_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("backends: [{name: a, type: demo}]\n")
    _, first = read_backends_file(path)
    _, same = read_backends_file(path)
    path.write_text("backends: [{name: a, type: demo}]  # changed\n")
    _, changed = read_backends_file(path)
    assert first == same != changed
