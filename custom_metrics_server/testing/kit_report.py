"""The conformance kit's report: one `Check` per check with its problems, the `KitReport` of a
run with what it measured, and the `KitFailure` a strict run raises.

Owns the outcome's shape; it must not run a check (`kit_checks`) or a backend (`kit`). Cost:
negligible (a list of checks).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Abort", "Check", "KitFailure", "KitReport"]


class KitFailure(AssertionError):
    """Some checks failed; the message lists them."""

    def __init__(self, report: KitReport) -> None:
        super().__init__(report.summary())
        self.report = report


@dataclass
class Check:
    """One check's outcome."""

    name: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        """Record a problem (the check fails)."""
        self.ok = False
        self.problems.append(problem)


@dataclass
class KitReport:
    """Every check, and what was measured."""

    checks: list[Check] = field(default_factory=list)
    #: median seconds of one listing call (the larger of the two kinds)
    listing_seconds: float = 0.0
    #: seconds from the start until `ready()` said ready
    ready_after: float = 0.0
    custom_metrics: int = 0
    external_metrics: int = 0

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.ok for check in self.checks)

    def summary(self) -> str:
        """One line per check, its problems below it."""
        lines = []
        for check in self.checks:
            lines.append(f"{'ok  ' if check.ok else 'FAIL'} {check.name}")
            lines += [f"       {problem}" for problem in check.problems]
        return "\n".join(lines)

    @contextmanager
    def check(self, name: str) -> Iterator[Check]:
        """A check that fails on any unexpected exception (named in the problem)."""
        current = Check(name)
        self.checks.append(current)
        try:
            yield current
        except Abort:
            pass
        except Exception as err:
            current.fail(f"raised {type(err).__name__}: {err}")


class Abort(Exception):
    """Stop a check after a problem that makes the rest meaningless."""
