"""Whether `serve --workers N` runs workers (workers.plan): N when every backend is
replicable, else one process, with one line naming the backends that decided it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from custom_metrics_server.plugins.config import parse_backends_file
from custom_metrics_server.plugins.loader import load_backends
from custom_metrics_server.workers.plan import plan_workers
from tests.fakes.cluster_process import write_kubeconfig

P = "tests.fakes.plugins"
DEMO = "  - {name: simulated, type: demo, settings: {pods: 10}}\n"


def load(text: str) -> Any:
    config = parse_backends_file("backends:\n" + text, source="b.yaml")
    return load_backends(config, base_dir=Path("/"), default_timeout=10.0)


def test_every_backend_replicable_runs_the_workers() -> None:
    plan = plan_workers(3, load(DEMO + f"  - {{name: copied, type: '{P}:replicable_instant'}}\n"))
    assert plan.workers == 3
    assert plan.level == logging.INFO
    assert plan.line == (
        "--workers 3: 3 worker processes, each serving the whole API with its own backends; "
        "this process only supervises (every backend is replicable: simulated (demo), copied "
        f"({P}:replicable_instant))"
    )


@pytest.mark.parametrize("factory", ["instant", "truthy_replicable"])
def test_a_plugin_not_declaring_it_serves_from_one_process(factory: str) -> None:
    plan = plan_workers(2, load(DEMO + f"  - {{name: held, type: '{P}:{factory}'}}\n"))
    assert plan.workers == 1
    assert plan.level == logging.WARNING
    assert plan.line == (
        "--workers 2 ignored: serving from this one process, since worker processes need "
        f"every backend to be replicable and this one is not: held ({P}:{factory}) "
        '(measured: docs/performance.md, "Workers")'
    )


def test_every_backend_that_is_not_is_named(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:1")
    plan = plan_workers(
        2,
        load(
            DEMO
            + f"  - {{name: cluster, type: kubernetes, settings: {{kubeconfig: '{kubeconfig}'}}}}\n"
            + f"  - {{name: held, type: '{P}:instant'}}\n"
        ),
    )
    assert plan.workers == 1
    assert "and these are not: cluster (kubernetes), held (tests.fakes.plugins:instant) (" in (
        plan.line
    )


def _cluster(tmp_path: Path) -> str:
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, "https://127.0.0.1:1")
    return f"  - {{name: cluster, type: kubernetes, settings: {{kubeconfig: '{kubeconfig}'}}}}\n"


def test_a_watching_backend_names_the_opt_in_that_would_run_the_workers(tmp_path: Path) -> None:
    plan = plan_workers(3, load(DEMO + _cluster(tmp_path)))
    assert plan.workers == 1
    assert plan.level == logging.WARNING
    assert plan.line == (
        "--workers 3 ignored: serving from this one process, since worker processes need "
        "every backend to be replicable and this one is not: cluster (kubernetes) "
        '(measured: docs/performance.md, "Workers"); --workers-replicate-watches runs it '
        "once in each worker, at 3 x the lists, watches and scrapes"
    )


def test_the_opt_in_runs_watching_backends_in_every_worker_and_says_the_cost(
    tmp_path: Path,
) -> None:
    plan = plan_workers(2, load(DEMO + _cluster(tmp_path)), replicate_watches=True)
    assert plan.workers == 2
    assert plan.level == logging.INFO
    assert plan.line == (
        "--workers 2: 2 worker processes, each serving the whole API with its own backends; "
        "this process only supervises (every backend is replicable: simulated (demo), cluster "
        "(kubernetes)); --workers-replicate-watches: every worker lists, watches and scrapes "
        "for cluster (kubernetes) on its own, 2 x what one process asks of the API server and "
        "the kubelets or pods"
    )


def test_the_opt_in_does_not_make_a_plugin_replicable(tmp_path: Path) -> None:
    loaded = load(DEMO + _cluster(tmp_path) + f"  - {{name: held, type: '{P}:instant'}}\n")
    plan = plan_workers(2, loaded, replicate_watches=True)
    assert plan.workers == 1
    assert plan.line.endswith(
        "and this one is not: held (tests.fakes.plugins:instant) "
        '(measured: docs/performance.md, "Workers")'
    )
    # Without the opt-in both are named, and no hint: the opt-in alone would not decide.
    assert plan_workers(2, loaded).line.endswith(
        "these are not: cluster (kubernetes), held (tests.fakes.plugins:instant) "
        '(measured: docs/performance.md, "Workers")'
    )


def test_the_opt_in_leaves_a_plan_without_watching_backends_as_it_was() -> None:
    loaded = load(DEMO)
    assert plan_workers(2, loaded, replicate_watches=True) == plan_workers(2, loaded)
