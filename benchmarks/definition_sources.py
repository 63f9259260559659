"""The MetricDefinition sources' pure steps, per call, in process (no I/O):

* formula compile and evaluate (`backends/definitions/formula.py`, the Rust `cel` interpreter of
  `common-expression-language`), for the docs' formula and a conditional; and, when `celpy` is
  importable (`pip install cel-python`; not a dependency), the same with cel-python, the
  alternative weighed in docs/metric-definitions.md;
* PromQL confinement (`backends/definitions/promql_scope.py`) of a typical query and of the
  deepest queries the operator cap lets through.

    python benchmarks/definition_sources.py            # about 20 s
    python benchmarks/definition_sources.py --smoke    # a short run

Figures: docs/performance.md, "MetricDefinition sources".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from custom_metrics_server.backends.definitions.formula import (  # noqa: E402
    Formula,
    compile_formula,
)
from custom_metrics_server.backends.definitions.promql_scope import (  # noqa: E402
    MAX_OPERATORS,
    confine,
)

FORMULAS = {
    "docs": ("orders / max(workers, 1.0)", {"orders": 120.0, "workers": 4.0}),
    "conditional": ("a > 10.0 ? a : b", {"a": 12.0, "b": 3.0}),
}
QUERIES = {
    "typical": (
        'sum by (pod) (rate(http_requests_total{job="web",code=~"5.."}[5m])) / on (pod) '
        'group_left sum by (pod) (rate(http_requests_total{job="web"}[5m]))'
    ),
    "deepest sum chain": "a + " * (MAX_OPERATORS - 1) + "a",
    "deepest call chain": "abs(" * (MAX_OPERATORS - 1) + "a" + ")" * (MAX_OPERATORS - 1),
}


def per_call_us(call: Callable[[], object], seconds: float) -> float:
    """CPU microseconds per call, over at least `seconds` of calls."""
    calls = 0
    started = time.process_time()
    while True:
        for _ in range(50):
            call()
        calls += 50
        spent = time.process_time() - started
        if spent >= seconds:
            return spent / calls * 1e6


def celpy_cases(seconds: float) -> list[tuple[str, float]]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import celpy  # type: ignore[import-not-found]
    except ImportError:
        return []
    env = celpy.Environment()
    rows = []
    for name, (expression, values) in FORMULAS.items():
        if "max(" in expression:
            continue  # cel-python has no max(); registering one is not the point here
        activation = {k: celpy.celtypes.DoubleType(v) for k, v in values.items()}
        program = env.program(env.compile(expression))
        rows.append(
            (
                f"cel-python compile {name}",
                per_call_us(lambda e=expression: env.program(env.compile(e)), seconds),
            )
        )
        rows.append(
            (
                f"cel-python evaluate {name}",
                per_call_us(lambda p=program, a=activation: p.evaluate(a), seconds),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a short run")
    args = parser.parse_args()
    seconds = 0.2 if args.smoke else 2.0
    rows: list[tuple[str, float]] = []
    for name, (expression, values) in FORMULAS.items():
        formula = compile_formula(expression, list(values))
        assert isinstance(formula, Formula), formula
        rows.append(
            (
                f"formula compile {name}",
                per_call_us(lambda e=expression, v=values: compile_formula(e, list(v)), seconds),
            )
        )
        rows.append(
            (
                f"formula evaluate {name}",
                per_call_us(lambda f=formula, v=values: f.evaluate(v), seconds),
            )
        )
    rows.extend(celpy_cases(seconds))
    for name, query in QUERIES.items():
        rows.append((f"confine {name}", per_call_us(lambda q=query: confine(q, "shop"), seconds)))
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}, {os.cpu_count()} cores")
    for name, us in rows:
        print(f"{name:40} {us:12.1f} us CPU per call")


if __name__ == "__main__":
    main()
